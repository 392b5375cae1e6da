"""Identifiers planted in a real server's log prefix and environment, shared by the public-text
canary tests (test_faults_public_text.py) and the KV-starved start they read (conftest.py)."""

from __future__ import annotations

PLANTED: dict[str, str] = {
    "private_domain_host": "db7.prod.acme-internal",
    "cloud_host": "ip-10-0-3-17.ec2.internal",
    "gke_node": "gke-prod-pool-1-abcd1234-x9z2",
    "pod": "vllm-7d9f8b6c4-x2x9z",
    "mac": "02:42:ac:11:00:02",
    "uuid": "3f2b8c1d-9e7a-4b6c-8d5e-1f0a2b3c4d5e",
    "pci": "0000:3b:00.0",
    "data_path": "/data/users/jdoe/ckpts",
    "basic_auth": "amRvZTpodW50ZXIy",
    "password": "hunter2-canary",
    "hf_token": "hf_CanaryQw3rTy8uIoPaSdFgHjKl",
    "github_token": "ghp_Canary0123456789abcdefghijABCDEFGH",
    "ipv4": "10.23.45.67",
    "ipv6": "fd00:beef::17",
    "email": "jdoe@acme-corp.example",
    "user": "jdoe",
}
"""One value of every shape an operator's log prefix or environment can carry."""

PREFIX = ("[{gke_node} {pod} {private_domain_host} {cloud_host} mac={mac} uuid={uuid} pci={pci} "
          "data={data_path} Authorization: Basic {basic_auth} DB_PASSWORD={password} HF_TOKEN={hf_token} "
          "GH={github_token} ip={ipv4} ip6={ipv6} owner={email}] ").format(**PLANTED)

ENV = {
    "VLLM_LOGGING_PREFIX": PREFIX,
    "NODE_NAME": PLANTED["private_domain_host"],
    "CLOUD_HOSTNAME": PLANTED["cloud_host"],
    "POD_NAME": PLANTED["pod"],
    "NODE_MAC": PLANTED["mac"],
    "MACHINE_UUID": PLANTED["uuid"],
    "GPU_PCI": PLANTED["pci"],
    "MODEL_CACHE": PLANTED["data_path"],
    "DB_PASSWORD": PLANTED["password"],
    "HF_TOKEN": PLANTED["hf_token"],
    "GITHUB_TOKEN": PLANTED["github_token"],
    "NODE_IP": PLANTED["ipv4"],
    "OWNER": PLANTED["email"],
}
"""The recipe's env (and so the server's): every value also planted as a deployment would."""

SESSION_ENV = {"CANARY_MODEL_NAME": f"{PLANTED['private_domain_host']}-model",
               "SESSION_NOTE": f"owner {PLANTED['email']} at {PLANTED['cloud_host']}"}
