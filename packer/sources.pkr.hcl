locals {
  # The build container gets a name so that Ansible reaches it through the
  # community.docker connection (Packer's SSH proxy offers only ssh-rsa).
  container = "efa-image-build-${uuidv4()}"
  # Where a docker build sees the controller's artifact cache (read-only; not in
  # the committed image).
  artifact_mount = "/run/efa-image-artifacts"

  # What the roles describe in /opt/efa-image/env.d/ (docker run reads no
  # profile scripts); `efa-image verify --image` checks that the two agree.
  # The flavour's own (var.image_env, var.image_path) come last: SageMaker's code
  # directory after every system directory.
  image_env = merge(var.image_env, {
    PATH                           = join(":", concat(["/opt/efa-image/venv/bin:/opt/efa-image/bin:/opt/nccl-tests/bin:/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:${var.base_path}"], var.image_path))
    RDMAV_FORK_SAFE                = "1"
    FI_EFA_FORK_SAFE               = "1"
    OMPI_ALLOW_RUN_AS_ROOT         = "1"
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = "1"
  })
  image_labels = merge(var.labels, {
    "org.efa-image.flavor"      = var.flavor
    "org.efa-image.profile"     = var.profile
    "org.efa-image.base-image"  = var.base_image
    "org.efa-image.fingerprint" = var.fingerprint
  })
}

source "docker" "image" {
  image  = var.base_image
  pull   = var.pull_base_image
  commit = true
  # The owner label lets the next build remove a container an interrupted one left.
  run_command = concat(
    ["-d", "-i", "-t", "--name", local.container],
    ["--label", "org.efa-image.build-owner=${var.build_owner}"],
    var.artifact_cache != "" ? ["--volume", "${var.artifact_cache}:${local.artifact_mount}:ro"] : [],
    ["{{.Image}}", "/bin/bash"],
  )
  # docker commit keeps the container's labels: the owner label is emptied, or
  # every container run from the image would look like this build's leftover.
  changes = concat(
    [for name, value in local.image_env : "ENV ${name}=${value}"],
    [for name, value in local.image_labels : "LABEL ${name}=\"${value}\""],
    ["LABEL org.efa-image.build-owner=\"\""],
    ["CMD [\"/bin/bash\"]"],
  )
}

# HARDWARE: only an AWS account can run this source; `packer validate` checks
# it, and the null source below runs its provisioners for real.
source "amazon-ebs" "ami" {
  region        = var.aws_region
  instance_type = var.aws_instance_type
  ssh_username  = var.aws_ssh_username
  ami_name      = "efa-image-${var.flavor}-${var.profile}-{{timestamp}}"
  tags          = local.image_labels

  source_ami_filter {
    filters = {
      name                = var.aws_source_ami_name
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
    owners      = var.aws_source_ami_owners
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.aws_volume_size
    volume_type           = "gp3"
    iops                  = 3000
    throughput            = 250
    delete_on_termination = true
  }
}

# An existing machine over SSH: the AMI builds' provisioners (host mode, the
# non-root default user with sudo) without the EC2 API. make test points it at
# a Debian container with sshd that stands in for a fresh instance.
source "null" "host" {
  communicator         = "ssh"
  ssh_host             = var.host_address
  ssh_port             = var.host_ssh_port
  ssh_username         = var.host_ssh_username
  ssh_private_key_file = var.host_ssh_private_key_file
  ssh_agent_auth       = var.host_ssh_private_key_file == ""
}
