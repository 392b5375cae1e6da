"""The scrubber: one canary per kind of private value, plus what it must leave alone.

Every test builds its Sanitizer with an explicit environment, host name and user name so
the result does not depend on the machine running the tests.
"""

from __future__ import annotations

import pytest

from pytest_vllmqual.privacy.sanitize import KINDS, Sanitizer


def make(*secrets: str, env: dict[str, str] | None = None, host: str = "gpu-node-17.cluster.internal",
         user: str = "qualuser") -> Sanitizer:
    return Sanitizer(secrets, environ=env or {}, hostname=host, username=user)


# -- secrets and tokens -----------------------------------------------------------------------


def test_known_secret_is_replaced_everywhere_and_counted() -> None:
    key = "vq-perRunKey0123456789abcdefghij"
    s = make(key)
    out = s.scrub(f"Authorization: {key}; again {key}")
    assert key not in out
    assert out.count("<secret>") == 2
    assert s.counts["secret"] == 2


def test_env_values_with_secret_names_are_secrets_but_short_settings_are_not() -> None:
    s = make(env={"HF_TOKEN": "hf_EnvTokenValue0123456789", "DB_PASSWORD": "correct-horse-battery",
                  "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG", "TOKENIZERS_PARALLELISM": "false",
                  "HOME_DIR_NAME": "correct-horse-battery-2"})
    out = s.scrub("t=hf_EnvTokenValue0123456789 p=correct-horse-battery a=wJalrXUtnFEMI/K7MDENG parallel false")
    assert "hf_EnvTokenValue" not in out and "correct-horse-battery" not in out and "wJalrXUtn" not in out
    assert out.endswith("parallel false")


@pytest.mark.parametrize("token", [
    "hf_AbCdEfGhIjKlMnOpQrStUvWx",
    "sk-abcdefghijklmnopqrstuvwx012345",
    "sk-proj-abcdefghijklmnopqrstuvwx_-12",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    "xoxb-123456789012-abcdefghijkl",
    "AKIAIOSFODNN7EXAMPLE",
    "vq-" + "A" * 32,
])
def test_api_key_shapes_are_scrubbed_without_being_known(token: str) -> None:
    s = make()
    out = s.scrub(f"the key was {token}, keep going")
    assert token not in out
    assert "<token>" in out and out.endswith(", keep going")
    assert s.counts["token"] == 1


def test_bearer_header_url_credentials_and_key_value_assignments() -> None:
    s = make()
    out = s.scrub("Authorization: Bearer abc.DEF-ghi_123456 | https://bob:pa55word@registry.example.org/v2 | "
                  "non-default args: {'api_key': ['plainkey99'], 'hf_token': 'hubtoken77', 'password': None} "
                  "password=hunter2hunter2 api-key: zzz999zzz")
    for leaked in ("abc.DEF-ghi_123456", "bob:pa55word", "plainkey99", "hubtoken77", "hunter2hunter2", "zzz999zzz"):
        assert leaked not in out
    assert "'password': None" in out, "an unset secret arg stays visible as unset"
    assert "Bearer <token>" in out


def test_token_counts_do_not_touch_ordinary_token_words() -> None:
    s = make()
    text = ("GPU KV cache size: 283,917 tokens; max_num_batched_tokens=8192; prompt_tokens: 119503; "
            "time to first token: 0.53 s; secret: no")
    assert s.scrub(text) == text
    assert s.counts == {}


# -- hosts and IPs ----------------------------------------------------------------------------


def test_own_hostname_short_and_fqdn_share_one_pseudonym() -> None:
    s = make()
    out = s.scrub("started on gpu-node-17 (gpu-node-17.cluster.internal), GPU-NODE-17 again")
    assert out == "started on host-A (host-A), host-A again"
    assert s.counts["hostname"] == 3


def test_private_names_and_registered_hosts_get_stable_pseudonyms_in_order() -> None:
    s = make(host="")
    s.add_identifier("hostname", "trainbox")  # the endpoint's host, registered by the run
    first = s.scrub("pull from registry.corp.internal then ip-10-0-3-17.ec2.internal, http://trainbox:8000/v1")
    second = s.scrub("registry.corp.internal again")
    assert first == "pull from host-A then host-B, http://host-C:8000/v1"
    assert second == "host-A again"


def test_a_public_name_nobody_taught_the_scrubber_is_public_text() -> None:
    s = make()
    text = ("Field required [type=missing]\n    For further information visit https://errors.pydantic.dev/2.14/v/missing; "
            "mirror db01.prod.example.com")
    assert s.scrub(text) == text
    assert s.counts == {}


def test_values_of_the_inherited_environment_are_private_plain_words_are_not() -> None:
    s = make(env={"NODE_NAME": "db01.prod.example.com", "MODEL_CACHE": "/data/users/jdoe/ckpts",
                  "PYTHONPATH": "/srv/a-1:/srv/b-2", "PAGER": "less", "ATTN": "FLASH_ATTN", "N": "1"})
    out = s.scrub("db01.prod.example.com read /data/users/jdoe/ckpts/x via /srv/b-2/m; less than FLASH_ATTN 1")
    for planted in ("db01.prod", "/data/users/jdoe", "/srv/b-2"):
        assert planted not in out, (planted, out)
    assert out.endswith("less than FLASH_ATTN 1")
    assert s.counts["env_value"] == 3


def test_words_the_report_names_on_purpose_are_kept_even_when_the_environment_holds_them() -> None:
    s = make(env={"VLLMQUAL_RECIPE": "tiny-cpu-4096", "NODE": "rack-7.lab"})
    s.keep("tiny-cpu-4096", None)
    assert s.scrub("recipe tiny-cpu-4096 on rack-7.lab") == "recipe tiny-cpu-4096 on <env>"


def test_loopback_names_are_never_registered_as_hosts() -> None:
    s = make(host="")
    s.add_identifier("hostname", "localhost")
    s.add_identifier("hostname", "127.0.0.1")
    assert s.scrub("http://localhost:8000 http://127.0.0.1:8000") == "http://localhost:8000 http://127.0.0.1:8000"


@pytest.mark.parametrize("text", [
    "vllm.entrypoints.openai.api_server [api_server.py:1234] gpu_model_runner.py",
    "runtime 0.11.2.dev280+gilded.gnosis.v20.vllmfa13d33.b12x06db0f4.fi1ac6942.cu132.20260809.r33",
    "deepseek-ai/DeepSeek-V4-Flash-0731 Qwen/Qwen2.5-7B-Instruct config.json model.safetensors README.md",
    "https://docs.vllm.ai/en/latest and http://127.0.0.1:8000/health",
    "For further information visit https://errors.pydantic.dev/2.14/v/missing",
    "See https://nanobind.readthedocs.io/en/latest/refleaks.html",
    "http://localhost:8000 http://0.0.0.0:8000 http://[::1]:8000",
    "https://pytest-vllmqual/schemas/report/1",
])
def test_names_that_are_not_private_hosts_are_kept(text: str) -> None:
    s = make()
    assert s.scrub(text) == text
    assert s.counts == {}


def test_private_ipv4_and_ipv6_are_scrubbed_loopback_and_unspecified_kept() -> None:
    s = make()
    out = s.scrub("peers 10.44.3.21, 192.168.1.5 and 10.44.3.21 v6 fd00:beef:1::21 fe80::1ff:fe23:4567:890a%eth0 "
                  "local 127.0.0.1 any 0.0.0.0 v6local ::1 any6 ::")
    assert out == ("peers ip-1, ip-2 and ip-1 v6 ip-3 ip-4 local 127.0.0.1 any 0.0.0.0 v6local ::1 any6 ::")
    assert s.counts["ip"] == 5


@pytest.mark.parametrize("text", [
    "INFO 08-10 12:34:56 [core.py:93] took 26.70 s",
    "version 0.11.2 cu132 1.2.3",
    "ratio 15.27 GiB / 75.64 GiB",
    "mac 00:1b:44:11:3a:b7",
])
def test_timestamps_versions_and_numbers_are_not_ips(text: str) -> None:
    s = make()
    assert s.scrub(text) == text


# -- GPUs, PCI, containers ----------------------------------------------------------------------


def test_gpu_uuids_become_gpu0_gpu1_stably() -> None:
    s = make()
    a, b = "GPU-3f1c2b9a-7d44-4e1b-9c0a-5b6e7f801234", "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    out = s.scrub(f"{a} {b} {a} MIG-11111111-2222-3333-4444-555555555555")
    assert out == "gpu0 gpu1 gpu0 gpu2"
    assert s.counts["gpu_uuid"] == 4


def test_pci_bus_ids_in_nvml_and_lspci_forms_are_one_device() -> None:
    s = make()
    out = s.scrub("nvml 00000000:3B:00.0 lspci 0000:3b:00.0 other 0000:5e:00.0 pci bus id: 3b:00.0")
    assert out == "nvml pci-1 lspci pci-1 other pci-2 pci bus id: pci-1"
    assert s.counts["pci_bus_id"] == 4


def test_container_ids_in_container_context_and_their_short_form() -> None:
    full = "4d2c9e1f0a7b3c5d6e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d"
    s = make()
    out = s.scrub(f"container {full} started\n/sys/fs/cgroup/system.slice/docker-{full}.scope\nlater id {full[:12]}")
    assert full not in out and full[:12] not in out
    assert out == ("container container-1 started\n/sys/fs/cgroup/system.slice/docker-container-1.scope\n"
                   "later id container-1")


def test_registered_container_id_is_scrubbed_without_context() -> None:
    full = "0123456789abcdef" * 4
    s = make()
    s.add_identifier("container_id", full)
    assert s.scrub(f"plain {full[:12]} and {full}") == "plain container-1 and container-1"


def test_digests_revisions_and_hex_without_container_context_are_kept() -> None:
    s = make()
    text = ("docker image voipmonitor/vllm@sha256:fdde59fed7f9fc12f9fd5ef1b3b3ea8d5097bf10ebad54b348497102c3a83f82 "
            "revision 9e165c30e2704aec5d9d593cce3eebd58bbef1cb artifact "
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 image digest fdde59fed7f9")
    assert s.scrub(text) == text


# -- home paths and users -------------------------------------------------------------------------


def test_home_paths_and_user_names_learned_from_them() -> None:
    s = make(user="")
    out = s.scrub("model /home/alice/models/x cache /root/.cache/hf mac /Users/bob/w win C:\\Users\\carol\\x "
                  "by alice and bob")
    assert out == "model <home>/models/x cache <home>/.cache/hf mac <home>/w win <home>\\x by <user> and <user>"
    assert s.counts["home_path"] == 4
    assert s.counts["user"] == 2


def test_current_user_is_scrubbed_but_generic_names_are_not() -> None:
    s = make(user="qualuser")
    assert s.scrub("run by qualuser: root cause in /usr/lib") == "run by <user>: root cause in /usr/lib"
    generic = make(user="root")
    assert generic.scrub("root cause") == "root cause"


# -- objects, counts, idempotence ---------------------------------------------------------------


def test_scrub_obj_recurses_scrubs_keys_and_keeps_declared_hashes() -> None:
    digest = "4d2c9e1f0a7b3c5d6e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d"
    s = make()
    obj = {
        "sha256": digest,
        "request_sha256": digest,
        "image_digest": f"sha256:{digest}",
        "note": f"container {digest}",
        "nested": [{"host": "gpu-node-17"}, ("10.1.2.3", 5, None, True)],
        "gpu-node-17": "as a key",
        "recipe_sha256": "not a hash /home/alice/x",
    }
    out = s.scrub_obj(obj)
    assert out["sha256"] == digest and out["request_sha256"] == digest and out["image_digest"] == f"sha256:{digest}"
    assert out["note"] == "container container-1"
    assert out["nested"] == [{"host": "host-A"}, ["ip-1", 5, None, True]]
    assert out["host-A"] == "as a key"
    assert out["recipe_sha256"] == "not a hash <home>/x"


def test_scrubbing_twice_changes_nothing_more() -> None:
    s = make("vq-secretsecretsecret")
    text = ("vq-secretsecretsecret gpu-node-17 10.0.0.9 GPU-3f1c2b9a-7d44-4e1b-9c0a-5b6e7f801234 0000:3b:00.0 "
            f"container {'ab' * 32} /home/qualuser/x hf_AbCdEfGhIjKlMnOpQrSt")
    once = s.scrub(text)
    counts = dict(s.counts)
    assert s.scrub(once) == once
    assert s.counts == counts


def test_reserve_keeps_new_pseudonyms_from_colliding_with_existing_ones() -> None:
    s = make(host="")
    s.reserve('{"a": "host-A on ip-1 with gpu0 in container-1"}')
    assert s.scrub("db.corp.internal 10.9.9.9 GPU-3f1c2b9a-7d44-4e1b-9c0a-5b6e7f801234") == "host-B ip-2 gpu1"


def test_redaction_summary_lists_every_kind_seen_and_only_those() -> None:
    s = make("vq-secretsecretsecret")
    s.add_env_values({"VLLM_LOGGING_PREFIX": "[rack-7b.lab] "})
    s.scrub("vq-secretsecretsecret hf_AbCdEfGhIjKlMnOpQrSt gpu-node-17 10.0.0.9 "
            "GPU-3f1c2b9a-7d44-4e1b-9c0a-5b6e7f801234 0000:3b:00.0 "
            f"container {'ab' * 32} /home/qualuser/x qualuser [rack-7b.lab] up")
    summary = s.redaction_summary()
    assert list(summary) == list(KINDS)
    assert all(n >= 1 for n in summary.values())
    assert make().redaction_summary() == {}


def test_unknown_identifier_kind_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown identifier kind"):
        make().add_identifier("ip", "10.0.0.1")


# -- what the scrubber learns: host, users, the recipe's env ---------------------------------------


def test_recipe_env_values_and_their_identifier_parts_are_scrubbed_short_settings_kept() -> None:
    s = make()
    s.add_env_values({"VLLM_LOGGING_PREFIX": "[edge-rack7.lab mac=02:42:ac:11:00:02] ",
                      "NODE_LABEL": "alpha-node", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1",
                      "MODE": "spawn", "CACHE": "/data/users/jdoe/cache"})
    text = ("[edge-rack7.lab mac=02:42:ac:11:00:02] INFO start on alpha-node; edge-rack7.lab again; "
            "cache /data/users/jdoe/cache; 1 GiB; threads 0|1; spawn; /v1/models")
    out = s.scrub(text)
    for planted in ("edge-rack7", "02:42:ac:11:00:02", "alpha-node", "/data/users/jdoe/cache"):
        assert planted not in out, planted
    assert "1 GiB; threads 0|1; spawn; /v1/models" in out
    assert s.redaction_summary().get("env_value", 0) >= 3


def test_a_home_directory_is_scrubbed_wherever_it_lives() -> None:
    s = make()
    s.add_home("/data/users/jdoe")
    s.add_home("/")  # too shallow to be a home: ignored, or every path would go
    assert s.scrub("read /data/users/jdoe/models/x and /data/users/jdoe2") == "read <home>/models/x and /data/users/jdoe2"


def test_the_machine_s_own_names_are_learned_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_vllmqual.privacy import sanitize

    monkeypatch.setattr(sanitize, "_machine_names", lambda: (("build-7.int.example", "build-7"), ("10.9.8.7",)))
    monkeypatch.setenv("HOME", "/srv/homes/ci-runner-9")
    monkeypatch.setenv("LOGNAME", "ci-runner-9")
    s = Sanitizer(environ={})
    out = s.scrub("on build-7 (build-7.int.example) as ci-runner-9 in /srv/homes/ci-runner-9/w from 10.9.8.7")
    for planted in ("build-7", "int.example", "ci-runner-9", "/srv/homes", "10.9.8.7"):
        assert planted not in out, (planted, out)


def test_variable_names_inside_an_env_value_are_not_taken_for_identifiers() -> None:
    s = make()
    s.add_env_values({"VLLM_LOGGING_PREFIX": "[DB_PASSWORD=hunter2-canary HF_TOKEN=x] "})
    assert s.scrub("env HF_TOKEN and DB_PASSWORD set; hunter2-canary") == "env HF_TOKEN and DB_PASSWORD set; <env>"


def test_the_endpoint_s_host_is_registered_unless_it_is_loopback_or_an_address() -> None:
    s = make(host="")
    for url in ("http://gpu-box-7:8000", "http://127.0.0.1:8000", "http://localhost:8000", None, "not a url"):
        s.add_endpoint(url)
    assert s.scrub("GET http://gpu-box-7:8000/v1/models failed; gpu-box-7 down") == \
        "GET http://host-A:8000/v1/models failed; host-A down"
    assert s.scrub("http://localhost:8000") == "http://localhost:8000"


def test_pytest_s_own_bookkeeping_variables_are_not_private_values() -> None:
    s = make(env={"PYTEST_CURRENT_TEST": "test_x.py::test_y[no-such-recipe] (setup)", "PYTEST_XDIST_WORKER": "gw0"})
    assert s.scrub("test_y[no-such-recipe]") == "test_y[no-such-recipe]"


def test_inherited_values_are_split_into_the_parts_that_name_something() -> None:
    from pytest_vllmqual.privacy.learned_values import inherited_identifiers

    assert inherited_identifiers("/srv/a-1:/srv/b-2") >= {"/srv/a-1:/srv/b-2", "/srv/a-1", "/srv/b-2"}
    assert inherited_identifiers("[node-17 rack7.lab] ") >= {"node-17", "rack7.lab"}
    assert inherited_identifiers("less") == set() and inherited_identifiers("FLASH_ATTN") == set()
    assert inherited_identifiers("1") == set() and inherited_identifiers("utf-8") == set()


def test_a_paths_standard_system_directories_are_not_private() -> None:
    """A PATH lists /bin and /usr/bin; a machine's own entries (~/.cargo/bin) stay private."""
    from pytest_vllmqual.privacy.learned_values import inherited_identifiers

    found = inherited_identifiers("/root/.cargo/bin:/usr/local/bin:/usr/bin:/bin:/sbin")
    assert {"/bin", "/usr/bin", "/usr/local/bin", "/sbin"}.isdisjoint(found)
    assert "/root/.cargo/bin" in found
