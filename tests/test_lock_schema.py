"""What a lock entry must hold: plain entries, and the file names of wheel sets' files."""

import pytest

from efa_image.artifacts import lock, lock_schema

GOOD_SHA = "a" * 64


def entry(**overrides):
    fields = {
        "version": "2.1.0",
        "role": "efa",
        "filename": "libfabric-{version}.tar.bz2",
        "urls": ["https://example.invalid/libfabric-{version}.tar.bz2"],
        "sha256": GOOD_SHA,
    }
    fields.update(overrides)
    return fields


def test_version_is_substituted_in_filename_and_urls():
    artifact = lock_schema.parse_entry("libfabric", entry(), "f: k")
    assert artifact.filename == "libfabric-2.1.0.tar.bz2"
    assert artifact.urls == ("https://example.invalid/libfabric-2.1.0.tar.bz2",)
    assert artifact.mirror_path() == "libfabric/2.1.0/libfabric-2.1.0.tar.bz2"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"urls": []}, r"versions.yml: efa_image_artifacts.libfabric: missing urls"),
        ({"urls": "https://x"}, r"\.urls: expected a list"),
        ({"urls": ["ftp://x/y"]}, r"\.urls: 'ftp://x/y' is not an http"),
        ({"sha256": "abc"}, r"\.sha256: 'abc' is not 64 hexadecimal digits"),
        ({"sha256": "g" * 64}, r"\.sha256: .* is not 64 hexadecimal"),
        ({"sha265": GOOD_SHA}, r"unknown field\(s\) sha265"),
        ({"kind": "rpm"}, r"\.kind: 'rpm' is not one of file, wheel"),
        ({"version": None}, r"missing version"),
    ],
)
def test_malformed_entries_are_rejected_naming_file_and_key(fields, message):
    with pytest.raises(lock.LockError, match=message):
        lock_schema.parse_entry(
            "libfabric", entry(**fields), "versions.yml: efa_image_artifacts.libfabric"
        )


GOOD_SHA512 = "b" * 128


def test_sha512_pins_the_file_in_place_of_sha256():
    fields = entry(sha512=GOOD_SHA512.upper())
    del fields["sha256"]
    artifact = lock_schema.parse_entry("x", fields, "f")
    assert (artifact.digest_kind, artifact.digest, artifact.sha256) == ("sha512", GOOD_SHA512, None)
    assert artifact.pinned and artifact.sha512 == GOOD_SHA512
    # Empty: unpinned, and `lock update` writes a sha512.
    fields = entry(sha512="")
    del fields["sha256"]
    unpinned = lock_schema.parse_entry("x", fields, "f")
    assert not unpinned.pinned and unpinned.digest_kind == "sha512"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sha512": GOOD_SHA512}, r"f: both sha256 and sha512 given: pin the file by exactly one"),
        ({"sha512": "", "sha256": ""}, r"both sha256 and sha512 given"),
        ({"sha256": None, "sha512": GOOD_SHA}, r"f\.sha512: 'a+' is not 128 hexadecimal digits"),
    ],
)
def test_sha512_entries_are_checked(fields, message):
    fields = entry(**fields)
    if fields.get("sha256") is None:
        del fields["sha256"]
    with pytest.raises(lock.LockError, match=message):
        lock_schema.parse_entry("x", fields, "f")


def test_wheel_set_files_take_sha512_in_place_of_sha256():
    wheel = {"filename": "a-1.0-py3-none-any.whl", "urls": ["https://x/a"], "sha512": GOOD_SHA512}
    set_entry = {"version": "1.0", "role": "pytorch", "kind": "wheelset", "wheels": [wheel]}
    (member,) = lock_schema.parse_wheelset("s", set_entry, "f")
    assert (member.digest_kind, member.digest) == ("sha512", GOOD_SHA512)
    both = {**wheel, "sha256": GOOD_SHA}
    with pytest.raises(lock.LockError, match=r"expected exactly the fields"):
        lock_schema.parse_wheelset("s", {**set_entry, "wheels": [both]}, "f")


def test_empty_sha256_means_unpinned():
    assert not lock_schema.parse_entry("x", entry(sha256=""), "f").pinned
    assert lock_schema.parse_entry("x", entry(sha256=GOOD_SHA.upper()), "f").sha256 == GOOD_SHA


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("Dep_A-2.0-py3-none-any.whl", ("dep-a", "2.0")),
        ("torch-2.5.1-1-cp311-cp311-manylinux1_x86_64.whl", ("torch", "2.5.1")),
        (
            "markupsafe-3.0.4-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
            ("markupsafe", "3.0.4"),
        ),
    ],
)
def test_wheel_file_names_give_the_normalised_project_and_version(filename, expected):
    assert lock_schema.wheel_name_version(filename, "f") == expected


@pytest.mark.parametrize(
    "filename", ["notawheel.tar.gz", "a-1-py3-none.whl", "a-1-py3-none-any.whl.zip", "a_b.whl"]
)
def test_what_is_no_wheel_file_name_is_refused_naming_where(filename):
    with pytest.raises(lock.LockError, match=rf"^at: '{filename}' is not a wheel file name"):
        lock_schema.wheel_name_version(filename, "at")


def test_sdist_file_names_are_pep_625s_tar_gz_only():
    assert lock_schema.sdist_name_version("Inotify_Simple-1.2.1.tar.gz", "f") == (
        "inotify-simple",
        "1.2.1",
    )
    for filename in ("mpi4py-3.1.6.zip", "x-1-py3-none-any.whl", "noversion.tar.gz"):
        with pytest.raises(lock.LockError, match=r"is not a source distribution"):
            lock_schema.sdist_name_version(filename, "f")
