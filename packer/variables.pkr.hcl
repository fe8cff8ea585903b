# Every input of the image builds, in one place. Runs on Debian's Packer 1.6.6
# (docker and amazon builders and the ansible provisioner built in) and on
# current Packer with those plugins installed.
#
# Build one source at a time, naming it with -only:
#   cd packer && packer build -only=docker.image -var flavor=efa-reduced -var profile=portable .
#   cd packer && packer build -only=amazon-ebs.ami -var profile=aws .   (AWS credentials)
#   cd packer && packer build -only=null.host -var host_address=ADDRESS -var host_ssh_private_key_file=KEY .
# Without -only Packer builds both sources; on a machine without AWS credentials
# the amazon-ebs one fails ("NoCredentialProviders") and Packer exits 1 even when
# the Docker image was committed. Packer 1.6.6 cannot choose sources from a
# variable (a build's sources must be static), so the flag it is.
#
# The profile means what it means to `efa-image build` and to ansible-playbook:
# the playbooks apply its methods and its lock overlay (group_vars/all/profile.yml).
# mirror, build_cache and lock_overlay default to the environment variables the
# efa-image CLI and the roles read (EFA_IMAGE_MIRROR, EFA_IMAGE_BUILD_CACHE,
# EFA_IMAGE_LOCK_OVERLAY); EFA_IMAGE_CACHE reaches Ansible unchanged.

variable "flavor" {
  type        = string
  default     = "efa"
  description = "Image flavour: which roles the image holds (playbooks/<flavor>.yml, playbooks/group_vars/all/flavors.yml)."
  validation {
    condition     = contains(["efa", "efa-reduced", "sagemaker", "sagemaker-reduced", "sagemaker-torchrun", "sagemaker-torchrun-reduced"], var.flavor)
    error_message = "The flavor must be one of: efa, efa-reduced, sagemaker, sagemaker-reduced, sagemaker-torchrun, sagemaker-torchrun-reduced."
  }
}

variable "profile" {
  type        = string
  default     = "aws"
  description = "Method profile: aws (EFA installer), upstream (source builds of the newest releases) portable (upstream archives from Debian's source pool), portable-cuda13 (portable with NCCL's CUDA 13 wheel, for a CUDA 13 base) or distro (the distribution's libfabric and Open MPI packages)."
  validation {
    condition     = contains(["aws", "upstream", "portable", "portable-cuda13", "distro"], var.profile)
    error_message = "The profile must be aws, upstream, portable, portable-cuda13 or distro."
  }
}

variable "base_image" {
  type        = string
  default     = "efa-image/base:debian13"
  description = "Docker base image. Production: nvidia/cuda:<ver>-devel-ubuntu22.04 (or -ubuntu24.04), or a Deep Learning Container."
}

variable "base_path" {
  type        = string
  default     = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  description = "PATH of the base image (efa-image build reads it): docker commit cannot expand $PATH, so the image's PATH is written out in full."
}

variable "image_env" {
  type        = map(string)
  default     = {}
  description = "ENV the flavour's roles add to the image (flavors.yml image_env: SageMaker's SAGEMAKER_SUBMIT_DIRECTORY)."
}

variable "image_path" {
  type        = list(string)
  default     = []
  description = "Directories the flavour's roles append to the image PATH (flavors.yml image_path: /opt/ml/code)."
}

variable "build_owner" {
  type        = string
  default     = "manual"
  description = "Labels the build container (efa-image build passes its process id, and removes containers of builds that no longer run)."
}

variable "cuda_home" {
  type        = string
  default     = "/usr/local/cuda"
  description = "CUDA of the base image (efa-image build finds it): /usr/local/cuda (nvidia/cuda) or /usr/lib/nvidia-cuda-toolkit (Debian)."
}

variable "pull_base_image" {
  type        = bool
  default     = false
  description = "Pull the base image before building (false for locally bootstrapped bases)."
}

variable "image_repository" {
  type        = string
  default     = "efa-image"
  description = "Repository of the built Docker image; tags carry flavour, profile and component versions."
}

variable "image_tags" {
  type        = list(string)
  default     = ["latest"]
  description = "Tags for the Docker image (efa-image build adds ones naming the component versions)."
}

variable "labels" {
  type        = map(string)
  default     = {}
  description = "Extra labels for the Docker image (efa-image build adds component versions)."
}

variable "manifest" {
  type        = string
  default     = ""
  description = "Where Packer's manifest post-processor writes (default: build/packer-manifest.json); efa-image build gives each build its own file, so builds side by side never read each other's image."
}

variable "fingerprint" {
  type        = string
  default     = ""
  description = "Digest of every input of the build (efa-image build computes it; an unchanged build reuses the image that carries it). Label org.efa-image.fingerprint and the image manifest; empty for builds outside efa-image."
}

variable "mirror" {
  type        = string
  default     = env("EFA_IMAGE_MIRROR")
  description = "Artifact mirror directory or URL on the controller; when set, the only source (default: EFA_IMAGE_MIRROR)."
}

variable "artifact_cache" {
  type        = string
  default     = env("EFA_IMAGE_CACHE")
  description = "The controller's artifact cache directory (efa-image build passes it; default: EFA_IMAGE_CACHE). Docker builds mount it read-only and link wheels from it instead of copying them; \"\" copies everything."
}

variable "build_cache" {
  type        = string
  default     = env("EFA_IMAGE_BUILD_CACHE")
  description = "Build cache on the controller: a directory, oci://HOST[:PORT]/REPOSITORY or DIR,oci://... (default: EFA_IMAGE_BUILD_CACHE; \"\" for ~/.cache/efa-image/builds, \"off\" to compile every time)."
  # Packer 1.6's functions (no regex): at most one directory and one oci://, "off" alone.
  validation {
    condition     = length([for part in split(",", var.build_cache) : part if substr(part, 0, 6) == "oci://"]) <= 1 && length([for part in split(",", var.build_cache) : part if substr(part, 0, 6) != "oci://"]) <= 1 && ! (length(split(",", var.build_cache)) == 2 && contains(split(",", var.build_cache), "off"))
    error_message = "The build_cache is off, a directory, oci://HOST[:PORT]/REPOSITORY, or DIR,oci://HOST[:PORT]/REPOSITORY."
  }
}

variable "lock_overlay" {
  type        = string
  default     = env("EFA_IMAGE_LOCK_OVERLAY")
  description = "Colon-separated lock overlay files applied after the profile's own (default: EFA_IMAGE_LOCK_OVERLAY); relative paths are under playbooks/."
}

variable "allow_unpinned" {
  type        = bool
  default     = false
  description = "Accept artifacts without a sha256 in the lock (efa-image build --allow-unpinned; not reproducible): the roles' artifact_allow_unpinned. Without it a role refuses an unpinned artifact before any change."
}

variable "ansible_playbook" {
  type        = string
  default     = ""
  description = "ansible-playbook to run (\"\": the project's .venv/bin/ansible-playbook when make setup made it, else the one on PATH); it needs the efa_image package, so the project's virtualenv."
}

variable "ansible_strategy" {
  type        = string
  default     = env("EFA_IMAGE_ANSIBLE_STRATEGY")
  description = "Ansible strategy of Docker builds (default: EFA_IMAGE_ANSIBLE_STRATEGY, else mitogen_linear: one Python interpreter in the build container for the whole play); linear is Ansible's own. AMI builds use Ansible's default."
}

variable "ansible_extra_vars" {
  type        = list(string)
  default     = []
  description = "Extra `key=value` variables for the playbook, e.g. efa_method=source."
}

variable "aws_region" {
  type        = string
  default     = "us-west-2"
  description = "AMI builds: region."
}

variable "aws_instance_type" {
  type        = string
  default     = "c5n.18xlarge"
  description = "AMI builds: build instance type (an EFA-capable one lets the installer verify the device)."
}

variable "aws_source_ami_name" {
  type        = string
  default     = "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"
  description = "AMI builds: name filter of the source AMI."
}

variable "aws_source_ami_owners" {
  type        = list(string)
  default     = ["099720109477"]
  description = "AMI builds: owners of the source AMI (Canonical by default)."
}

variable "aws_ssh_username" {
  type        = string
  default     = "ubuntu"
  description = "AMI builds: SSH user of the source AMI."
}

variable "aws_volume_size" {
  type        = number
  default     = 100
  description = "AMI builds: root volume size in GiB."
  validation {
    condition     = var.aws_volume_size >= 30
    error_message = "The root volume needs at least 30 GiB for CUDA, NCCL and the build trees."
  }
}

variable "host_address" {
  type        = string
  default     = "127.0.0.1"
  description = "Existing-host builds (-only=null.host): the address of the host, reached over SSH."
}

variable "host_ssh_port" {
  type        = number
  default     = 22
  description = "Existing-host builds: the SSH port."
}

variable "host_ssh_username" {
  type        = string
  default     = "admin"
  description = "Existing-host builds: the user to connect as, with passwordless sudo (as an AMI's default user: admin on Debian, ubuntu on Ubuntu, ec2-user on Amazon Linux)."
}

variable "host_ssh_private_key_file" {
  type        = string
  default     = ""
  description = "Existing-host builds: the private key of host_ssh_username (\"\": the SSH agent's keys)."
}
