"""The decision whether to build a component: any changed input rebuilds, nothing else does."""

import json

import pytest

from efa_image.building import install_record

INPUTS = {
    "artifact": {"name": "libfabric", "version": "2.1.0", "sha256": "a" * 64},
    "prefix": "/opt/amazon/efa",
    "steps": [["./configure", "--prefix=/opt/amazon/efa", "--enable-efa"], ["make"]],
    "libfabric": "b" * 64,
    "cuda": "12.4",
}


def installed(inputs=INPUTS, component="libfabric"):
    return install_record.record(component, inputs)


def test_matching_record_builds_nothing():
    decision = install_record.decide(installed(), INPUTS)
    assert not decision.build and decision.reasons == []
    assert "nothing to build" in decision.render("libfabric")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("artifact", "version"), "2.1.1"),
        # A re-pinned archive under the same version: the case the old copies missed.
        (("artifact", "sha256"), "c" * 64),
        (("artifact", "name"), "libfabric_git"),
        (("prefix",), "/opt/libfabric"),
        (("steps",), [["./configure", "--prefix=/opt/amazon/efa"], ["make"]]),
        (("libfabric",), "d" * 64),
        (("cuda",), "12.8"),
    ],
    ids=lambda v: ".".join(v) if isinstance(v, tuple) else None,
)
def test_each_input_changes_the_outcome(path, value):
    wanted = json.loads(json.dumps(INPUTS))
    target = wanted
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    decision = install_record.decide(installed(), wanted)
    assert decision.build
    assert decision.reasons == [
        f"{'.'.join(path)} changed: " + decision.reasons[0].split(": ", 1)[1]
    ]
    assert ".".join(path) in decision.render("libfabric")


def test_added_and_removed_inputs_rebuild():
    assert install_record.decide(installed(), INPUTS | {"nccl": "x"}).reasons == [
        'nccl added ("x")'
    ]
    smaller = {k: v for k, v in INPUTS.items() if k != "cuda"}
    assert install_record.decide(installed(), smaller).reasons == ['cuda removed (was "12.4")']


def test_unrelated_facts_do_not_rebuild():
    # Key order, tuples for lists and the component's name in the record change nothing.
    reordered = dict(reversed(list(INPUTS.items())))
    reordered["steps"] = [tuple(step) for step in INPUTS["steps"]]
    assert not install_record.decide(installed(), reordered).build
    assert not install_record.decide(installed(component="other"), INPUTS).build


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, "not installed"),
        ("", "not installed"),
        ("{not json", "record unreadable or of an old format"),
        # The records of the per-role copies before the shared build path.
        ('{"method": "source", "version": "2.1.0"}', "record unreadable or of an old format"),
        ('{"format": 2, "inputs": []}', "record unreadable or of an old format"),
    ],
)
def test_missing_or_unusable_record_builds(text, reason):
    assert install_record.decide(text, INPUTS) == install_record.Decision(True, [reason])


def test_force_builds_a_matching_installation():
    assert install_record.decide(installed(), INPUTS, force=True).reasons == ["forced"]


def test_record_round_trips_and_is_stable():
    text = installed()
    assert install_record.parse(text) == install_record.normalize(INPUTS)
    assert text == installed(dict(reversed(list(INPUTS.items()))))
    assert json.loads(text)["component"] == "libfabric"


def test_long_values_are_shortened_in_reasons():
    wanted = INPUTS | {"libfabric": "e" * 64}
    (reason,) = install_record.decide(installed(), wanted).reasons
    assert reason.startswith("libfabric changed: ") and reason.count("...") == 2
    assert len(reason) < 160
