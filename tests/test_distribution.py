"""efa-image distribution: the checked config, each rule's refusal, hyperparameters.json."""

import json
import re
from pathlib import Path

import pytest
import yaml

from efa_image import cli
from efa_image.compat import smdistributed
from efa_image.sagemaker import distribution, instance_types, snippets
from efa_image.sagemaker.distribution import DistributionError
from efa_image.sagemaker.instance_types import InstanceTypeError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src/efa_image/data/sagemaker_instance_types.yml"
P4D = instance_types.instance_type("ml.p4d.24xlarge")
P3 = instance_types.instance_type("ml.p3.16xlarge")
P3DN = instance_types.instance_type("ml.p3dn.24xlarge")
G6E = instance_types.instance_type("ml.g6e.48xlarge")
P5 = instance_types.instance_type("ml.p5.48xlarge")
EFA_OPTIONS = "-x FI_EFA_USE_DEVICE_RDMA=1 -x FI_PROVIDER=efa -x RDMAV_FORK_SAFE=1"
NEWEST_MP = "1.15.0"


def errors(findings):
    return [f.message for f in findings if f.level == "error"]


def warnings(findings):
    return [f.message for f in findings if f.level == "warning"]


def mp_config(parameters, mpi=None, **extra):
    mpi = {"enabled": True, "processes_per_host": 8} if mpi is None else mpi
    return {
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
        "mpi": mpi,
        **extra,
    }


# --- The instance type table -------------------------------------------------


def test_table_is_well_formed_and_names_its_sources():
    """Read without the loader: every type has GPUs, EFA facts and sources the header defines."""
    text = DATA.read_text()
    header_tags = set(re.findall(r"^#   (\w+) {2,}", text, re.MULTILINE))
    assert {"sdk", "hyperpod", "ec2", "toolkit", "ofi", "deadline"} <= header_tags
    types = yaml.safe_load(text)["instance_types"]
    for name, entry in types.items():
        assert name.startswith("ml."), name
        assert isinstance(entry["gpus"], int) and entry["gpus"] > 0, name
        assert set(entry["sources"]) <= header_tags, name
        assert not (entry["gpudirect_rdma"] and not entry["efa"]), name
    # the brief's types, as the sources give them
    for name in ("ml.p3.2xlarge", "ml.p3.8xlarge", "ml.p3.16xlarge", "ml.p3dn.24xlarge"):
        assert types[name]["gpu"] == "V100"
    assert (types["ml.p3.2xlarge"]["gpus"], types["ml.p3.8xlarge"]["gpus"]) == (1, 4)
    assert types["ml.p3dn.24xlarge"]["efa"] and not types["ml.p3dn.24xlarge"]["gpudirect_rdma"]
    for name in ("ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5en.48xlarge"):
        assert types[name]["gpus"] == 8 and types[name]["efa"] and types[name]["gpudirect_rdma"]


def test_loader_matches_the_file_and_refuses_a_bad_entry(tmp_path):
    table = instance_types.load_instance_types()
    assert len(table) == len(yaml.safe_load(DATA.read_text())["instance_types"])
    bad = tmp_path / "types.yml"
    bad.write_text(
        "instance_types:\n  ml.x.large: {gpus: 1, gpu: V100, efa: false, gpudirect_rdma: true, "
        "sources: [sdk]}\n"
    )
    with pytest.raises(InstanceTypeError, match="GPUDirect RDMA only with EFA"):
        instance_types.load_instance_types(bad)


def test_instance_type_accepts_the_ec2_name_and_refuses_an_unknown_one():
    assert instance_types.instance_type("p4d.24xlarge") == P4D
    with pytest.raises(InstanceTypeError, match=r"unknown .*'ml.p9.huge'.*ml.p4d.24xlarge"):
        instance_types.instance_type("ml.p9.huge")


# --- The correct config ------------------------------------------------------


def test_p4d_modelparallel_is_the_guides_config_with_efa_flags():
    config = distribution.recommend(P4D, "modelparallel")
    assert config == {
        "smdistributed": {
            "modelparallel": {
                "enabled": True,
                "parameters": {"pipeline_parallel_degree": 2, "microbatches": 4, "ddp": True},
            }
        },
        "mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": EFA_OPTIONS},
    }
    assert distribution.check(config, P4D, "modelparallel") == []


def test_p3_16xlarge_has_no_efa_flags_and_one_process_per_gpu():
    for library in ("mpi", "modelparallel"):
        config = distribution.recommend(P3, library)
        assert config["mpi"] == {"enabled": True, "processes_per_host": 8}, library
        assert distribution.check(config, P3, library) == []


def test_p3dn_gets_efa_without_device_rdma():
    config = distribution.recommend(P3DN, "mpi")
    assert config["mpi"]["custom_mpi_options"] == "-x FI_PROVIDER=efa -x RDMAV_FORK_SAFE=1"


def test_dataparallel_puts_the_flags_in_its_own_section():
    config = distribution.recommend(P4D, "dataparallel")
    assert config == {
        "smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": EFA_OPTIONS}}
    }
    assert distribution.check(config, P4D, "dataparallel") == []


def test_p5_smdistributed_comes_with_torch_distributed():
    config = distribution.recommend(P5, "modelparallel")
    assert config["torch_distributed"] == {"enabled": True}
    assert distribution.check(config, P5, "modelparallel") == []


def test_the_default_version_is_the_newest_build_and_old_ones_take_partitions():
    assert distribution.resolve_version("modelparallel", None) == NEWEST_MP
    assert distribution.resolve_version("dataparallel", None) == "2.6.0"
    old = distribution.recommend(P3, "modelparallel", "1.5.0")
    assert "partitions" in old["smdistributed"]["modelparallel"]["parameters"]
    assert "pipeline_parallel_degree" not in old["smdistributed"]["modelparallel"]["parameters"]


def test_efa_and_no_efa_override_the_table():
    assert "custom_mpi_options" not in distribution.recommend(P4D, "mpi", efa=False)["mpi"]
    with pytest.raises(DistributionError, match=r"has no EFA.*drop --efa"):
        distribution.recommend(P3, "mpi", efa=True)
    # a type no source gives EFA for: no flags by default, the guide's (without RDMA) on request
    assert "custom_mpi_options" not in distribution.recommend(G6E, "mpi")["mpi"]
    forced = distribution.recommend(G6E, "mpi", efa=True)["mpi"]["custom_mpi_options"]
    assert forced == "-x FI_PROVIDER=efa -x RDMAV_FORK_SAFE=1"


# --- Each rule's refusal -----------------------------------------------------


def test_pipeline_parallel_degree_is_refused_before_1_6_0():
    found = errors(
        distribution.check(mp_config({"pipeline_parallel_degree": 2}), P3, None, "1.5.0")
    )
    assert found == [
        "smdistributed.modelparallel.parameters: rename 'pipeline_parallel_degree' to "
        "'partitions': smdistributed-modelparallel 1.5.0 takes 'partitions' "
        "(pipeline_parallel_degree replaced partitions only from 1.6.0)"
    ]


def test_partitions_is_refused_from_1_6_0_and_by_default():
    for version in ("1.7.0", None):
        found = errors(distribution.check(mp_config({"partitions": 2}), P3, None, version))
        assert len(found) == 1 and "rename 'partitions' to 'pipeline_parallel_degree'" in found[0]
    assert distribution.check(mp_config({"partitions": 2}), P3, None, "1.5.0") == []


def test_missing_or_bad_degree_is_refused():
    assert errors(distribution.check(mp_config({"ddp": True}), P3)) == [
        "smdistributed.modelparallel.parameters: add 'pipeline_parallel_degree', the number of "
        "model partitions"
    ]
    found = errors(distribution.check(mp_config({"pipeline_parallel_degree": 0}), P3))
    assert found == [
        "smdistributed.modelparallel.parameters.pipeline_parallel_degree: 0 must be a positive "
        "integer"
    ]
    both = {"pipeline_parallel_degree": 2, "ddp": True, "horovod": True}
    assert "exclude each other" in errors(distribution.check(mp_config(both), P3))[0]


def test_processes_per_host_above_the_gpus_is_refused():
    config = {"mpi": {"enabled": True, "processes_per_host": 9}}
    assert errors(distribution.check(config, P3, "mpi")) == [
        "mpi.processes_per_host: 9 is more than the 8 GPUs of ml.p3.16xlarge: set it to 8 "
        "(one process per GPU)"
    ]
    one_gpu = instance_types.instance_type("ml.p3.2xlarge")
    config["mpi"]["processes_per_host"] = 2
    assert "more than the 1 GPUs" in errors(distribution.check(config, one_gpu))[0]
    with pytest.raises(DistributionError, match="more than the 8 GPUs"):
        distribution.recommend(P4D, "mpi", processes_per_host=16)
    config["mpi"]["processes_per_host"] = "8"
    assert "must be a positive integer" in errors(distribution.check(config, P3))[0]


def test_missing_processes_per_host_is_a_warning():
    findings = distribution.check({"mpi": {"enabled": True}}, P3, "mpi")
    assert errors(findings) == []
    assert warnings(findings) == [
        'mpi: no processes_per_host: the toolkit then starts one per GPU; say "processes_per_host":'
        " 8 (the guide makes it required)"
    ]


@pytest.mark.parametrize("option", ["--mca", "-mca"])
def test_vader_single_copy_mechanism_is_refused(option):
    config = {
        "mpi": {
            "enabled": True,
            "processes_per_host": 8,
            "custom_mpi_options": f"{option} btl_vader_single_copy_mechanism none",
        }
    }
    assert errors(distribution.check(config, P3, "mpi")) == [
        f"mpi.custom_mpi_options: remove '{option} btl_vader_single_copy_mechanism none': the "
        "sagemaker-training toolkit already passes -mca btl_vader_single_copy_mechanism, and "
        "mpirun fails on an MCA parameter listed twice"
    ]


def test_other_mca_parameters_of_the_launcher_are_refused_and_new_ones_pass():
    config = {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": ""}}
    config["mpi"]["custom_mpi_options"] = "-mca pml ob1 --mca btl_tcp_if_include eth0"
    assert len(errors(distribution.check(config, P3, "mpi"))) == 2
    config["mpi"]["custom_mpi_options"] = "--mca coll_hcoll_enable 0 -x NCCL_DEBUG=INFO"
    assert distribution.check(config, P3, "mpi") == []
    # ModelTrainer's driver also passes plm_rsh_num_concurrent; the toolkit does not
    options = "-mca plm_rsh_num_concurrent 2"
    assert distribution.check_mpi_options(options, P3, "x", "v2") == []
    assert errors(distribution.check_mpi_options(options, P3, "x", "v3"))


def test_efa_provider_is_refused_without_efa():
    config = {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": EFA_OPTIONS}}
    found = distribution.check(config, P3, "mpi")
    assert errors(found) == [
        "mpi.custom_mpi_options: remove -x FI_EFA_USE_DEVICE_RDMA=1: ml.p3.16xlarge has no EFA",
        "mpi.custom_mpi_options: remove -x FI_PROVIDER=efa: ml.p3.16xlarge has no EFA, and the "
        "EFA provider hangs the job there",
    ]
    assert warnings(found) == [
        "mpi.custom_mpi_options: -x RDMAV_FORK_SAFE=1 does nothing without EFA: drop it"
    ]


def test_device_rdma_is_refused_where_efa_does_not_reach_the_gpu():
    config = {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": EFA_OPTIONS}}
    assert errors(distribution.check(config, P3DN, "mpi")) == [
        "mpi.custom_mpi_options: remove -x FI_EFA_USE_DEVICE_RDMA=1: EFA on ml.p3dn.24xlarge "
        "(V100) has no GPUDirect RDMA (aws-ofi-nccl gdr_required only on p4d, p4de, p5, p5e, p5en)"
    ]


def test_efa_flags_on_a_type_without_a_source_are_warnings():
    config = {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": EFA_OPTIONS}}
    found = distribution.check(config, G6E, "mpi")
    assert errors(found) == [] and len(warnings(found)) == 2


def test_missing_efa_flags_on_an_efa_type_are_a_warning():
    config = {"mpi": {"enabled": True, "processes_per_host": 8}}
    assert warnings(distribution.check(config, P4D, "mpi")) == [
        f'mpi: ml.p4d.24xlarge has EFA: add "custom_mpi_options": "{EFA_OPTIONS}" for the '
        "guide's best performance"
    ]
    config["mpi"]["custom_mpi_options"] = "-x FI_PROVIDER=efa"
    assert (
        "add -x FI_EFA_USE_DEVICE_RDMA=1 -x RDMAV_FORK_SAFE=1"
        in warnings(distribution.check(config, P4D, "mpi"))[0]
    )


def test_model_parallel_and_data_parallel_together_are_refused():
    config = mp_config({"pipeline_parallel_degree": 2})
    config["smdistributed"]["dataparallel"] = {"enabled": True}
    found = errors(distribution.check(config, P3, "modelparallel"))
    assert found == [
        "smdistributed: model parallel and data parallel cannot run in one job: keep only "
        "'modelparallel' (its 'ddp' parameter gives data parallelism across its replicas) or "
        "only 'dataparallel'"
    ]


def test_model_parallel_without_mpi_is_refused():
    config = {"smdistributed": {"modelparallel": {"enabled": True, "parameters": {}}}}
    config["smdistributed"]["modelparallel"]["parameters"]["pipeline_parallel_degree"] = 2
    assert errors(distribution.check(config, P3)) == [
        'mpi: model parallel runs under MPI: add "mpi": {"enabled": True, "processes_per_host": 8}'
    ]


def test_disabled_sections_and_unknown_strategies_are_refused():
    config = mp_config({"pipeline_parallel_degree": 2})
    config["smdistributed"]["modelparallel"]["enabled"] = "yes"
    assert 'set "enabled": True' in errors(distribution.check(config, P3))[0]
    assert (
        "unknown strategy ['pipeline']"
        in errors(distribution.check({"smdistributed": {"pipeline": {}}}, P3))[0]
    )
    assert (
        'set "enabled": True, or drop'
        in errors(distribution.check({"mpi": {"enabled": False}}, P3))[0]
    )
    assert "enables no strategy" in errors(distribution.check({}, P3, "mpi"))[0]


def test_unknown_smdistributed_version_is_refused_naming_the_known_builds():
    with pytest.raises(
        DistributionError, match=r"modelparallel 1\.99\.0 is no known build; known: "
    ):
        distribution.resolve_version("modelparallel", "1.99.0")
    assert set(distribution.known_versions("modelparallel")) == {
        b.version for b in smdistributed.load_builds()["modelparallel"]
    }
    found = errors(distribution.check(mp_config({"partitions": 2}), P3, None, "1.99.0"))
    assert len(found) == 1 and "is no known build" in found[0]
    with pytest.raises(DistributionError, match="plain MPI has none"):
        distribution.resolve_version("mpi", "1.0.0")


def test_a_config_for_another_library_is_refused():
    found = errors(
        distribution.check({"mpi": {"enabled": True, "processes_per_host": 8}}, P3, "modelparallel")
    )
    assert found == [
        "the config is for mpi, not modelparallel: give --library mpi or check the right file"
    ]


def test_p5_smdistributed_without_torch_distributed_is_refused():
    config = mp_config({"pipeline_parallel_degree": 2})
    config["mpi"]["custom_mpi_options"] = EFA_OPTIONS
    assert errors(distribution.check(config, P5)) == [
        "the SDK refuses smdistributed on ml.p5.48xlarge unless torch_distributed is on: add "
        '"torch_distributed": {"enabled": True}'
    ]


def test_dataparallel_takes_no_processes_per_host():
    with pytest.raises(
        DistributionError, match=r"one process per GPU .* drop --processes-per-host"
    ):
        distribution.recommend(P4D, "dataparallel", processes_per_host=4)


# --- SDK v3 (ModelTrainer) ---------------------------------------------------


def test_v3_mpi_fields_are_checked_like_v2():
    distributed = {
        "class": "MPI",
        "process_count_per_node": 16,
        "mpi_additional_options": ["--mca", "btl_vader_single_copy_mechanism", "none"],
    }
    found = errors(distribution.check(distribution.from_v3(distributed), P4D, "mpi", sdk="v3"))
    assert len(found) == 2
    assert "more than the 8 GPUs" in found[0] and "ModelTrainer's MPI driver" in found[1]
    with pytest.raises(DistributionError, match="not 'Torchrun'"):
        distribution.from_v3({"class": "Torchrun"})


def test_v3_snippet_uses_the_sdks_classes_and_refuses_smdistributed():
    snippet = snippets.render_v3(distribution.recommend(P4D, "mpi"), P4D, "mpi")
    assert "from sagemaker.train.distributed import MPI" in snippet
    assert "from sagemaker.train import ModelTrainer" in snippet
    # SDK v3's -np is process_count_per_node: the total, spread 8 per instance.
    assert "process_count_per_node=16,  # 2 instances x 8" in snippet
    assert (
        'mpi_additional_options=["--map-by", "ppr:8:node", "-x", "FI_EFA_USE_DEVICE_RDMA=1", '
        '"-x", "FI_PROVIDER=efa", "-x", "RDMAV_FORK_SAFE=1"],' in snippet
    )
    assert "every one on algo-1" in snippet
    single = snippets.render_v3(distribution.recommend(P4D, "mpi"), P4D, "mpi", 1)
    assert "process_count_per_node=8,\n" in single and "ppr:" not in single
    for library in ("modelparallel", "dataparallel"):
        with pytest.raises(DistributionError, match="use --sdk v2"):
            snippets.render_v3(distribution.recommend(P4D, library), P4D, library)


# --- hyperparameters.json ----------------------------------------------------


def test_mpi_hyperparameters_are_json_encoded_as_the_sdk_writes_them():
    config = distribution.recommend(P4D, "mpi")
    assert distribution.hyperparameters(config, "train.py", "/opt/ml/code") == {
        "sagemaker_submit_directory": '"/opt/ml/code"',
        "sagemaker_program": '"train.py"',
        "sagemaker_container_log_level": "20",
        "sagemaker_mpi_enabled": "true",
        "sagemaker_mpi_num_of_processes_per_host": "8",
        "sagemaker_mpi_custom_mpi_options": json.dumps(EFA_OPTIONS),
    }


def test_modelparallel_hyperparameters_carry_mp_parameters():
    config = distribution.recommend(P3, "modelparallel")
    values = distribution.hyperparameters(
        config,
        "train.py",
        "s3://bucket/job/source/sourcedir.tar.gz",
        instance_type="ml.p3.16xlarge",
        user_hyperparameters={"epochs": 2},
        job_name="job",
        region="us-west-2",
    )
    assert list(values) == [
        "epochs",
        "sagemaker_submit_directory",
        "sagemaker_program",
        "sagemaker_container_log_level",
        "sagemaker_job_name",
        "sagemaker_region",
        "sagemaker_mpi_enabled",
        "sagemaker_mpi_num_of_processes_per_host",
        "sagemaker_mpi_custom_mpi_options",
        "mp_parameters",
        "sagemaker_distributed_dataparallel_enabled",
        "sagemaker_instance_type",
    ]
    assert values["epochs"] == "2"
    assert values["sagemaker_mpi_custom_mpi_options"] == '""'  # the SDK's default
    assert json.loads(values["mp_parameters"]) == {
        "pipeline_parallel_degree": 2,
        "microbatches": 4,
        "ddp": True,
    }
    assert values["sagemaker_distributed_dataparallel_enabled"] == "false"
    assert values["sagemaker_instance_type"] == '"ml.p3.16xlarge"'
    # every value decodes, as the toolkit's read_hyperparameters does
    assert all(json.loads(v) is not None for v in values.values())


def test_dataparallel_and_p5_hyperparameters():
    values = distribution.hyperparameters(
        distribution.recommend(P4D, "dataparallel"),
        "t.py",
        "/opt/ml/code",
        instance_type="ml.p4d.24xlarge",
    )
    assert values["sagemaker_distributed_dataparallel_enabled"] == "true"
    assert values["sagemaker_distributed_dataparallel_custom_mpi_options"] == json.dumps(
        EFA_OPTIONS
    )
    assert "sagemaker_mpi_enabled" not in values
    p5 = distribution.hyperparameters(
        distribution.recommend(P5, "modelparallel"),
        "t.py",
        "/opt/ml/code",
        instance_type="p5.48xlarge",
    )
    assert p5["sagemaker_torch_distributed_enabled"] == "true"
    assert p5["sagemaker_instance_type"] == '"ml.p5.48xlarge"'
    assert "mp_parameters" in p5


def test_hyperparameters_refuse_an_absolute_entry_point():
    with pytest.raises(DistributionError, match="relative to the submit directory"):
        distribution.hyperparameters(
            {"mpi": {"enabled": True}}, "/opt/ml/code/train.py", "/opt/ml/code"
        )


# --- The command -------------------------------------------------------------


def test_command_prints_the_v2_dict_and_writes_hyperparameters(tmp_path, capsys):
    out = tmp_path / "config" / "hyperparameters.json"
    argv = ["distribution", "--instance-type", "ml.p4d.24xlarge", "--library", "modelparallel"]
    argv += ["--hyperparameters", str(out), "--entry-point", "train.py"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert '"pipeline_parallel_degree": 2,' in printed and '"enabled": True,' in printed
    assert f'"custom_mpi_options": "{EFA_OPTIONS}",' in printed
    assert "smdistributed-modelparallel 1.15.0: the image needs" in printed
    assert "1.15.0 (PyTorch 2.0.0, cu118, cp310" in printed and "1.15.0 (PyTorch 1.13.1" in printed
    assert 'image_uri="<your image in ECR>",' in printed
    values = json.loads(out.read_text())
    assert values["sagemaker_program"] == '"train.py"'
    assert values["sagemaker_instance_type"] == '"ml.p4d.24xlarge"'


def test_command_check_prints_one_line_per_problem_and_fails(tmp_path, capsys):
    config = tmp_path / "distribution.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "distribution": {
                    "smdistributed": {
                        "modelparallel": {"enabled": True, "parameters": {"partitions": 2}}
                    },
                    "mpi": {
                        "enabled": True,
                        "processes_per_host": 16,
                        "custom_mpi_options": "--mca btl_vader_single_copy_mechanism none",
                    },
                }
            }
        )
    )
    out = tmp_path / "hp.json"
    argv = ["distribution", "--instance-type", "p3.16xlarge", "--library", "modelparallel"]
    argv += ["--check", str(config), "--hyperparameters", str(out), "--entry-point", "train.py"]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)
    assert "3 problem(s) for ml.p3.16xlarge" in captured.err
    assert not out.exists()  # nothing written for a refused config


def test_command_check_passes_a_good_json_config(tmp_path, capsys):
    config = tmp_path / "d.json"
    config.write_text(json.dumps(distribution.recommend(P4D, "mpi")))
    argv = [
        "distribution",
        "--instance-type",
        "ml.p4d.24xlarge",
        "--library",
        "mpi",
        "--check",
        str(config),
    ]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.strip() == f"{config}: ok for ml.p4d.24xlarge"


def test_command_check_refuses_the_options_that_shape_a_printed_config(tmp_path, capsys):
    config = tmp_path / "d.json"
    config.write_text("{}")
    argv = ["distribution", "--instance-type", "ml.p4d.24xlarge", "--library", "mpi"]
    assert cli.main([*argv, "--check", str(config), "--processes-per-host", "8"]) == 1
    assert "drop them with --check" in capsys.readouterr().err


def test_command_v3_check_reads_the_mpi_fields(tmp_path, capsys):
    config = tmp_path / "trainer.yaml"
    config.write_text(
        "distributed:\n  class: MPI\n  process_count_per_node: 8\n"
        "  mpi_additional_options: [-mca, plm_rsh_num_concurrent, '4']\n"
    )
    argv = ["distribution", "--instance-type", "ml.p3.16xlarge", "--library", "mpi"]
    assert cli.main([*argv, "--sdk", "v3", "--check", str(config)]) == 1
    assert capsys.readouterr().out == (
        "warning: SDK v3's MPI driver starts `mpirun --host algo-1:N,algo-2:N -np N` with N = "
        "process_count_per_node: N ranks in all, every one on algo-1: on more than one instance "
        "set process_count_per_node to instance_count x 8 and add mpi_additional_options "
        '["--map-by", "ppr:8:node"] (efa-image distribution --sdk v3 prints it)\n'
        "error: mpi.custom_mpi_options: remove '-mca plm_rsh_num_concurrent 4': ModelTrainer's "
        "MPI driver already passes -mca plm_rsh_num_concurrent, and mpirun fails on an MCA "
        "parameter listed twice\n"
    )
    assert cli.main([*argv, "--check", str(config)]) == 1  # as v2: not a distribution dict
    assert "enables no strategy" in capsys.readouterr().out


def test_command_v3_and_its_refusals(capsys):
    argv = ["distribution", "--instance-type", "ml.p3.16xlarge", "--library", "mpi", "--sdk", "v3"]
    assert cli.main(argv) == 0
    assert "distributed=MPI(" in capsys.readouterr().out
    assert cli.main([*argv[:4], "modelparallel", "--sdk", "v3"]) == 1
    assert "use --sdk v2" in capsys.readouterr().err
    assert (
        cli.main(["distribution", "--instance-type", "ml.p3.16xlarge", "--library", "mpi", "--efa"])
        == 1
    )
    assert "has no EFA" in capsys.readouterr().err


def test_the_printed_v3_config_passes_its_own_check():
    """process_count_per_node is the total with the spread: the per-host rules see 8 per host."""
    distributed = {
        "class": "MPI",
        "process_count_per_node": 16,
        "mpi_additional_options": ["--map-by", "ppr:8:node", "-x", "FI_PROVIDER=efa"],
    }
    assert distribution.check_v3(distributed) == []
    mpi = distribution.from_v3(distributed)["mpi"]
    assert mpi["processes_per_host"] == 8
    assert errors(distribution.check(distribution.from_v3(distributed), P4D, "mpi", sdk="v3")) == []
    assert distribution.v3_spread(["--map-by=ppr:4:node:pe=2"]) == 4
    assert distribution.v3_spread(["--map-by", "slot"]) is None
