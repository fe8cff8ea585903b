"""efa-image distribution: the checked config, the rules across its sections, the command."""

import json

import pytest
import yaml

from distribution_cases import (
    EFA_OPTIONS,
    P3,
    P4D,
    P5,
    errors,
    mp_config,
)
from efa_image import cli
from efa_image.sagemaker import (
    distribution,
)
from efa_image.sagemaker.advice import DistributionError


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
