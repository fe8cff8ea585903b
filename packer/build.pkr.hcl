locals {
  # The project's Ansible settings, where the controller takes artifacts from,
  # and where it keeps compiled components for identical rebuilds.
  ansible_env_vars = [
    "ANSIBLE_CONFIG=${path.root}/../ansible.cfg",
    "ANSIBLE_ROLES_PATH=${path.root}/../roles",
    "EFA_IMAGE_MIRROR=${var.mirror}",
    "EFA_IMAGE_LOCK_OVERLAY=${var.lock_overlay}",
    "EFA_IMAGE_BUILD_CACHE=${var.build_cache}",
  ]
  # The artifact role's options that efa-image build passes on (JSON: a boolean
  # stays a boolean).
  artifact_vars = jsonencode({ artifact_allow_unpinned = var.allow_unpinned })
  # The project's virtualenv (make setup) holds Ansible and the efa_image
  # package its plugins import: packer build needs no activated virtualenv.
  venv_ansible_playbook = "${path.root}/../.venv/bin/ansible-playbook"
  # Host mode (AMIs and existing hosts): what the playbook needs besides the
  # docker builds' settings. The base it records is the source's (below).
  host_ansible_env_vars = concat(local.ansible_env_vars, ["ANSIBLE_HOST_KEY_CHECKING=False"])
  host_extra_arguments = concat(
    ["--become", "--extra-vars", "efa_image_profile=${var.profile} efa_mode=host efa_image_cuda_home=${var.cuda_home}"],
    ["--extra-vars", "efa_image_fingerprint=${var.fingerprint}"],
    ["--extra-vars", local.artifact_vars],
    [for item in var.ansible_extra_vars : "--extra-vars=${item}"],
  )
  # Docker builds: one Python interpreter in the build container for the whole
  # play (plugins/strategy/mitogen_linear.py, found through ansible.cfg).
  ansible_strategy = var.ansible_strategy != "" ? var.ansible_strategy : "mitogen_linear"
  ansible_playbook = var.ansible_playbook != "" ? var.ansible_playbook : (
    fileexists(local.venv_ansible_playbook) ? abspath(local.venv_ansible_playbook) : "ansible-playbook"
  )
}

build {
  description = "One playbook per flavour, for Docker images (container mode, -only=docker.image), AMIs (host mode, -only=amazon-ebs.ami; AWS credentials needed) and existing hosts over SSH (host mode, -only=null.host). Name one source with -only: without it, a machine without AWS credentials fails the amazon-ebs build."
  sources     = ["source.docker.image", "source.amazon-ebs.ami", "source.null.host"]

  # The manifest post-processor does not create its directory (a fresh checkout
  # has no build/), and a post-processor that fails discards the image.
  provisioner "shell-local" {
    inline = ["mkdir -p '${path.root}/../build'"]
  }

  provisioner "ansible" {
    command       = local.ansible_playbook
    playbook_file = "${path.root}/../playbooks/${var.flavor}.yml"
    # With the linear strategy, pipelining: one `docker exec` per task instead of
    # several (an image build with every compile in the build cache took 116 s
    # instead of 154 s here). Containers run as root, so no sudo requiretty can
    # get in its way.
    ansible_env_vars = concat(local.ansible_env_vars, ["ANSIBLE_PIPELINING=True", "ANSIBLE_STRATEGY=${local.ansible_strategy}"],
      var.artifact_cache != "" ? ["EFA_IMAGE_CACHE=${var.artifact_cache}", "EFA_IMAGE_ARTIFACT_MOUNT=${local.artifact_mount}"] : [],
    )
    # Extra variables outrank the inventory Packer writes for its SSH proxy:
    # Ansible talks to the named build container directly. `docker` (which
    # resolves to community.docker.docker) is the name Mitogen takes over. The
    # system Python has apt's bindings: Mitogen discovers the interpreter again
    # for every docker task, and once the pytorch role made its environment, the
    # python3.11 first on the image's PATH is that environment's.
    extra_arguments = concat(
      ["--extra-vars", "ansible_host=${local.container} ansible_connection=docker ansible_python_interpreter=/usr/bin/python3"],
      ["--extra-vars", "efa_image_profile=${var.profile} efa_image_base_image=${var.base_image} efa_image_cuda_home=${var.cuda_home}"],
      ["--extra-vars", "efa_image_fingerprint=${var.fingerprint}"],
      ["--extra-vars", local.artifact_vars],
      [for item in var.ansible_extra_vars : "--extra-vars=${item}"],
    )
    only = ["docker.image"]
  }

  # Host mode, for AMIs and existing hosts: Ansible connects straight to the
  # machine over SSH (no proxy) as the source's user, with the key Packer uses,
  # and becomes root with sudo; Ansible's own strategy (Mitogen is for the docker
  # builds). Packer's SSH communicator takes a new machine's host key on trust,
  # and Ansible does the same here.
  provisioner "ansible" {
    command          = local.ansible_playbook
    playbook_file    = "${path.root}/../playbooks/${var.flavor}.yml"
    use_proxy        = false
    ansible_env_vars = local.host_ansible_env_vars
    # The base the manifest records: the AMI's name filter, or the host's address.
    extra_arguments = concat(local.host_extra_arguments, ["--extra-vars", jsonencode({
      efa_image_base_image = source.type == "amazon-ebs" ? var.aws_source_ami_name : "host ${var.host_address}"
    })])
    only = ["amazon-ebs.ami", "null.host"]
  }

  # The last step before the AMI is registered: the playbook's verify phase,
  # after the clean-up removed the toolchain, changes nothing and must pass.
  provisioner "ansible" {
    command          = local.ansible_playbook
    playbook_file    = "${path.root}/../playbooks/${var.flavor}.yml"
    use_proxy        = false
    ansible_env_vars = local.host_ansible_env_vars
    extra_arguments  = concat(local.host_extra_arguments, ["--tags", "verify"])
    only             = ["amazon-ebs.ami", "null.host"]
  }

  post-processor "manifest" {
    output     = var.manifest != "" ? var.manifest : "${path.root}/../build/packer-manifest.json"
    strip_path = true
    custom_data = {
      fingerprint = var.fingerprint
    }
  }
}
