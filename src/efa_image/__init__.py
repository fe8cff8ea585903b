"""efa-image: GPU distributed-training images for AWS from Ansible roles."""

__version__ = "0.1.0"
