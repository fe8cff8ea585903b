"""Instance types, options and configs that the tests of efa_image.sagemaker share."""

from efa_image.sagemaker import instance_types

P4D = instance_types.instance_type("ml.p4d.24xlarge")
P3 = instance_types.instance_type("ml.p3.16xlarge")
P3DN = instance_types.instance_type("ml.p3dn.24xlarge")
G6E = instance_types.instance_type("ml.g6e.48xlarge")
P5 = instance_types.instance_type("ml.p5.48xlarge")
EFA_OPTIONS = "-x FI_EFA_USE_DEVICE_RDMA=1 -x FI_PROVIDER=efa -x RDMAV_FORK_SAFE=1"
NEWEST_MP = "1.15.0"


def errors(advice):
    return [a.message for a in advice if a.level == "error"]


def warnings(advice):
    return [a.message for a in advice if a.level == "warning"]


def mp_config(parameters, mpi=None, **extra):
    mpi = {"enabled": True, "processes_per_host": 8} if mpi is None else mpi
    return {
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
        "mpi": mpi,
        **extra,
    }
