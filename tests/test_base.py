import dataclasses
import json

import pytest

from efa_image import cli
from efa_image.building import base, base_recipes


def test_recipes_cover_debian_12_13_and_cuda():
    assert {"debian12", "debian13", "debian13-cuda"} <= set(base_recipes.RECIPES)
    assert base_recipes.RECIPES["debian13-cuda"].parent == "debian13"
    for recipe in base_recipes.RECIPES.values():
        if not recipe.parent:
            assert {"python3", "python3-apt", "ca-certificates"} <= set(recipe.packages)


def test_sources_include_contrib_non_free_and_security():
    sources = base_recipes.RECIPES["debian13"].sources()
    assert sources.count("Components: main contrib non-free non-free-firmware") == 2
    assert "Suites: trixie trixie-updates" in sources
    assert "Suites: trixie-security" in sources


def test_fingerprint_changes_with_content_and_parent(monkeypatch):
    recipe = base_recipes.RECIPES["debian13"]
    assert recipe.fingerprint() == base_recipes.RECIPES["debian13"].fingerprint()
    changed = dataclasses.replace(recipe, packages=(*recipe.packages, "curl"))
    assert changed.fingerprint() != recipe.fingerprint()
    cuda_before = base_recipes.RECIPES["debian13-cuda"].fingerprint()
    monkeypatch.setitem(base_recipes.RECIPES, "debian13", changed)
    assert base_recipes.RECIPES["debian13-cuda"].fingerprint() != cuda_before


def test_fingerprint_ignores_the_mirror(monkeypatch):
    before = base_recipes.RECIPES["debian12"].fingerprint()
    monkeypatch.setattr(base_recipes, "DEBIAN_MIRROR", "http://mirror.example.internal/debian")
    assert base_recipes.RECIPES["debian12"].fingerprint() == before


def test_labels_and_changes_describe_the_image():
    recipe = base_recipes.RECIPES["debian13-cuda"]
    labels = base.labels_for(recipe, {"cuda.version": "12.4"})
    assert labels["org.efa-image.base.recipe"] == recipe.fingerprint()
    assert labels["org.efa-image.base.cuda.version"] == "12.4"
    assert labels["org.efa-image.base.parent"].endswith(":debian13")
    args = base.change_args(recipe, labels)
    assert args[0::2] == ["--change"] * (len(args) // 2)
    assert "ENV CUDA_HOME=/usr/lib/nvidia-cuda-toolkit" in args
    assert f"LABEL org.efa-image.base.cuda.version={json.dumps('12.4')}" in args
    assert 'CMD ["/bin/bash"]' in base.change_args(base_recipes.RECIPES["debian12"], {})


def test_prepare_rootfs_leaves_nothing_of_the_host(tmp_path):
    for directory in (
        "etc/apt/sources.list.d",
        "etc/dpkg/dpkg.cfg.d",
        "etc/apt/apt.conf.d",
        "var/lib/apt/lists",
        "var/cache/apt/archives",
        "var/log/apt",
    ):
        (tmp_path / directory).mkdir(parents=True)
    for leftover in (
        "etc/resolv.conf",
        "etc/hostname",
        "etc/apt/sources.list",
        "var/lib/apt/lists/x_Packages",
        "var/cache/apt/pkgcache.bin",
        "var/cache/apt/archives/a.deb",
        "var/log/dpkg.log",
        "var/log/apt/history.log",
    ):
        (tmp_path / leftover).write_text("host")
    base.prepare_rootfs(base_recipes.RECIPES["debian12"], tmp_path)
    remaining = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    assert remaining == {
        "etc/apt/sources.list.d/debian.sources",
        "etc/dpkg/dpkg.cfg.d/excludes",
        "etc/dpkg/dpkg.cfg.d/docker-apt-speedup",
        "etc/apt/apt.conf.d/docker-clean",
        "etc/apt/apt.conf.d/docker-no-languages",
    }
    assert (tmp_path / "etc/apt/apt.conf.d/docker-no-languages").read_text() == (
        'Acquire::Languages "none";\n'
    )
    assert (tmp_path / "etc/dpkg/dpkg.cfg.d/docker-apt-speedup").read_text() == "force-unsafe-io\n"
    assert "bookworm-security" in (tmp_path / "etc/apt/sources.list.d/debian.sources").read_text()


def test_recipe_for_ref():
    assert base.recipe_for(base_recipes.RECIPES["debian12"].ref) is base_recipes.RECIPES["debian12"]
    assert base.recipe_for("nvidia/cuda:12.4.1-devel-ubuntu22.04") is None


def test_missing_mmdebstrap_names_the_fix(monkeypatch):
    monkeypatch.setattr(base.shutil, "which", lambda name: None)
    with pytest.raises(base.EfaImageError, match=r"mmdebstrap is not installed.*make setup"):
        base.build_bootstrapped(base_recipes.RECIPES["debian12"])


def test_cli_unknown_recipe_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(cli.setup, "ensure_docker", lambda: "running")
    assert cli.main(["base", "debian99"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "efa-image: error: unknown base image recipe 'debian99'; known: "
        + ", ".join(base_recipes.RECIPES)
    ]


def test_cli_help_explains_the_workflow(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "workflow:" in out and "efa-image base" in out and "make image" in out


def _wheel(path, members):
    import zipfile

    with zipfile.ZipFile(path, "w") as wheel:
        for name, (data, mode) in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            wheel.writestr(info, data)
    return path


def test_unpack_places_the_wheels_tree_under_the_prefix_with_modes_links_and_ld_conf(tmp_path):
    import tarfile

    unpack = base_recipes.Unpack(
        artifacts=("set",),
        prefix="/usr/local/cuda",
        member_root="nvidia/cu13/",
        links=(("lib64", "lib"), ("lib/libcudart.so", "libcudart.so.13")),
        ld_conf=("lib",),
    )
    nvcc = _wheel(
        tmp_path / "nvcc.whl",
        {
            "nvidia/cu13/bin/nvcc": (b"ELF", 0o755),
            "nvidia_cuda_nvcc-13.2.86.dist-info/RECORD": (b"", 0o644),
        },
    )
    runtime = _wheel(tmp_path / "rt.whl", {"nvidia/cu13/lib/libcudart.so.13": (b"so", 0o644)})
    out = tmp_path / "out.tar"
    assert base_recipes.unpack_tar([nvcc, runtime], unpack, out) == 2
    with tarfile.open(out) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {
            "usr/local/cuda/bin/nvcc",
            "usr/local/cuda/lib/libcudart.so.13",
            "usr/local/cuda/lib64",
            "usr/local/cuda/lib/libcudart.so",
            "etc/ld.so.conf.d/cuda.conf",
        }
        assert members["usr/local/cuda/bin/nvcc"].mode == 0o755
        assert members["usr/local/cuda/lib64"].linkname == "lib"
        assert members["usr/local/cuda/lib/libcudart.so"].linkname == "libcudart.so.13"
        conf = tar.extractfile("etc/ld.so.conf.d/cuda.conf").read()
        assert conf == b"/usr/local/cuda/lib\n"


def test_unpack_refuses_members_that_leave_the_prefix(tmp_path):
    from efa_image.errors import EfaImageError

    unpack = base_recipes.Unpack(artifacts=("set",), prefix="/opt/x", member_root="nvidia/")
    evil = _wheel(tmp_path / "evil.whl", {"nvidia/../../etc/passwd": (b"x", 0o644)})
    with pytest.raises(EfaImageError, match="leaves the prefix"):
        base_recipes.unpack_tar([evil], unpack, tmp_path / "out.tar")


def test_cuda13_recipe_unpacks_the_locked_wheels_and_fingerprints_their_digests(monkeypatch):
    from efa_image.artifacts import lock

    recipe = base_recipes.RECIPES["debian13-cuda13"]
    assert recipe.parent == "debian13" and recipe.unpack.prefix == "/usr/local/cuda"
    assert "CUDA_HOME=/usr/local/cuda" in recipe.env
    files = base_recipes.unpack_artifacts(recipe.unpack)
    assert {a.wheelset for a in files} == {"cuda13_toolkit"}
    projects = {a.name.split("/")[1] for a in files}
    assert projects == {
        "nvidia-cuda-nvcc",
        "nvidia-cuda-crt",
        "nvidia-nvvm",
        "nvidia-cuda-runtime",
        "nvidia-cuda-cccl",
        "nvidia-nvml-dev",
    }
    assert all(a.pinned and a.version.startswith("13.") for a in files)
    before = recipe.fingerprint()
    real_load = lock.load

    def repinned(path=None, overlays=()):
        loaded = real_load(path, overlays)
        name = "cuda13_toolkit/nvidia-cuda-nvcc"
        loaded.artifacts[name] = loaded.artifacts[name].with_digest("0" * 64)
        return loaded

    monkeypatch.setattr(lock, "load", repinned)
    assert recipe.fingerprint() != before


def test_derived_script_probes_with_the_recipes_environment():
    script = base.derived_script(base_recipes.RECIPES["debian13-cuda13"])
    assert "apt-get" not in script and "ldconfig" in script
    # The ENV holds only once committed: the probe gets it on its command line.
    assert "; env CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:" in script
    assert script.endswith(" nvcc --version")
    assert "apt-get install -y -q --no-install-recommends nvidia-cuda-toolkit" in (
        base.derived_script(base_recipes.RECIPES["debian13-cuda"])
    )
