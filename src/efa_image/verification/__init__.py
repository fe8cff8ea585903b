"""Verification: fi_info, NCCL logs, nccl-tests, and the checks in containers and on hosts."""
