import pytest

from efa_image.errors import EfaImageError
from efa_image.verification import nccl_tests

SAMPLE = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1234 on ip-10-0-0-1 device  0 [0x10] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1235 on ip-10-0-0-1 device  1 [0x20] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    18.50    0.00    0.00      0    18.20    0.00    0.00      0
     1048576        262144     float     sum      -1    45.10   23.25   43.59      0    44.80   23.41   43.89      0
   134217728      33554432     float     sum      -1   1020.1  131.57  246.70      0   1019.3  131.68  246.89      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 112.345
#
"""  # noqa: E501

TWO_HOSTS = """\
# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 0 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   6899 on ip-10-0-0-1 device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   6900 on ip-10-0-0-1 device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   6733 on ip-10-0-0-2 device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid   6734 on ip-10-0-0-2 device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#
  1073741824     268435456     float     sum      -1   9101.2  117.98  221.21    N/A   9099.8  118.00  221.24    N/A
  8589934592    2147483648     float     sum      -1    71234  120.59  226.10    N/A    71230  120.60  226.12    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 223.67
"""  # noqa: E501


def test_sample_rows_header_and_summary():
    result = nccl_tests.parse(SAMPLE)
    assert result.header == {"nThread": 1, "nGpus": 1, "minBytes": 8, "maxBytes": 134217728}
    assert [r.size for r in result.rows] == [8, 1048576, 134217728]
    last = result.rows[-1]
    assert (last.count, last.type, last.redop, last.root) == (33554432, "float", "sum", -1)
    assert last.out_of_place == nccl_tests.Measurement(1020.1, 131.57, 246.70, 0)
    assert last.in_place == nccl_tests.Measurement(1019.3, 131.68, 246.89, 0)
    assert result.largest is last
    assert result.avg_busbw == pytest.approx(112.345)
    assert (result.out_of_bounds, result.out_of_bounds_ok) == (0, True)
    assert result.ok


def test_devices_and_hostnames():
    result = nccl_tests.parse(SAMPLE)
    assert result.devices[1] == nccl_tests.Device(
        rank=1,
        group=0,
        pid=1235,
        hostname="ip-10-0-0-1",
        device=1,
        bus_id="0x20",
        name="NVIDIA H100 80GB HBM3",
    )
    assert result.hostnames == {"ip-10-0-0-1"}
    assert nccl_tests.parse(TWO_HOSTS).hostnames == {"ip-10-0-0-1", "ip-10-0-0-2"}


def test_na_wrong_when_validation_is_off():
    result = nccl_tests.parse(TWO_HOSTS)
    assert [r.in_place.wrong for r in result.rows] == [None, None]
    assert result.rows[1].in_place.busbw == pytest.approx(226.12)
    assert result.ok


def test_failed_out_of_bounds_and_wrong_counts():
    text = SAMPLE.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED")
    result = nccl_tests.parse(text)
    assert (result.out_of_bounds, result.out_of_bounds_ok) == (3, False)
    assert not result.ok
    wrong = SAMPLE.replace("246.89      0", "246.89      7")
    assert nccl_tests.parse(wrong).rows[-1].in_place.wrong == 7
    assert not nccl_tests.parse(wrong).ok


def test_missing_out_of_bounds_line_is_not_ok():
    text = "\n".join(line for line in SAMPLE.splitlines() if "Out of bounds" not in line)
    assert nccl_tests.parse(text).out_of_bounds is None
    assert not nccl_tests.parse(text).ok


def test_other_collectives_and_old_layouts():
    text = (
        "   1048576   262144  float  none  -1  45.1  23.25  20.34  0  44.8  23.41  20.48  0\n"
        "   1048576   262144  float  none   0  45.1  23.25  23.25  0  44.8  23.41  23.41  0\n"
        "   1048576   262144  float   0  45.1  23.25  23.25  0  44.8  23.41  23.41  0\n"
        "   1048576   262144  float  45.1  23.25  20.34  0e+00  44.8  23.41  20.48  0e+00\n"
    )
    rows = nccl_tests.parse(text).rows
    assert [(r.redop, r.root) for r in rows] == [("none", -1), ("none", 0), ("", 0), ("", None)]
    # The old `error` column is a max error, not a count of wrong elements.
    assert rows[3].in_place.wrong is None


def test_launcher_prefixes_and_noise_are_tolerated():
    lines = SAMPLE.splitlines()
    tagged = "\n".join(f"[1,0]<stdout>:{line}" for line in lines)
    stamped = "\n".join(f"2024-05-01T12:00:00.123Z {line}" for line in lines)
    labelled = "\n".join(f"0: {line}" for line in lines)
    for text in (tagged, stamped, labelled):
        result = nccl_tests.parse(text)
        assert [r.size for r in result.rows] == [8, 1048576, 134217728]
        assert result.avg_busbw == pytest.approx(112.345)
        assert len(result.devices) == 2
    noisy = "NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n12 warnings\n" + SAMPLE
    assert len(nccl_tests.parse(noisy).rows) == 3


def test_crash_output_raises_parse_error():
    crash = (
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor)\n"
        "# Using devices\n"
        "ip-10-0-0-1: Test NCCL failure common.cu:1005 'unhandled system error'\n"
        " .. ip-10-0-0-1 pid 1234: Test failure common.cu:891\n"
    )
    with pytest.raises(nccl_tests.ParseError, match=r"failed before measuring.*common\.cu:1005"):
        nccl_tests.parse(crash)
    with pytest.raises(ValueError, match="no output"):
        nccl_tests.parse("")
    assert issubclass(nccl_tests.ParseError, EfaImageError)


def test_packaged_thresholds():
    table = nccl_tests.load_thresholds()
    expected = {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"}
    assert expected | {"p6-b200.48xlarge"} <= set(table)
    for floors in table.values():
        assert set(floors) == {1, 2}
        assert floors[1] > floors[2] > 0


def test_thresholds_file_errors(tmp_path):
    bad = tmp_path / "t.yml"
    bad.write_text("p5.48xlarge: {two_nodes: 200}\n")
    with pytest.raises(EfaImageError, match=r"p5\.48xlarge\.two_nodes"):
        nccl_tests.load_thresholds(bad)
    bad.write_text("p5.48xlarge: 200\n")
    with pytest.raises(EfaImageError, match=r"p5\.48xlarge: expected"):
        nccl_tests.load_thresholds(bad)
    bad.write_text("p5.48xlarge: {nodes_2: [\n")
    with pytest.raises(EfaImageError, match=r"t\.yml: not YAML"):
        nccl_tests.load_thresholds(bad)
    good = tmp_path / "good.yml"
    good.write_text("p5.48xlarge:\n  nodes_2: 180.5\n  nodes_4: 170\n")
    assert nccl_tests.load_thresholds(good) == {"p5.48xlarge": {2: 180.5, 4: 170.0}}


def test_threshold_pass_and_fail():
    result = nccl_tests.parse(TWO_HOSTS)
    finding = nccl_tests.check_bandwidth(result, "p5.48xlarge", {"p5.48xlarge": {2: 200}})
    assert finding.ok
    assert "226.12 GB/s at 8589934592 B (in-place) >= floor 200" in finding.detail
    assert "2 node(s)" in finding.detail
    low = nccl_tests.check_bandwidth(result, "p5.48xlarge", {"p5.48xlarge": {2: 300}})
    assert not low.ok
    assert "< floor 300" in low.detail


def test_threshold_node_count_and_plain_number():
    result = nccl_tests.parse(SAMPLE)  # one host, largest size 128 MiB
    finding = nccl_tests.check_bandwidth(result, "p5.48xlarge")  # packaged table
    assert not finding.ok  # 246.89 < the 1-node NVLink floor
    assert "1 node(s)" in finding.detail
    assert "-e 8G" in finding.detail
    # Four nodes use the nearest multi-node floor; a plain number is one floor for all.
    assert nccl_tests.check_bandwidth(result, "x", {"x": {1: 900, 2: 200}}, nodes=4).ok
    assert nccl_tests.check_bandwidth(result, "x", {"x": 240.0}).ok
    missing = nccl_tests.check_bandwidth(result, "x", {"x": {1: 900}}, nodes=2)
    assert not missing.ok
    assert "2 node(s)" in missing.detail


def test_threshold_unknown_instance_type():
    result = nccl_tests.parse(SAMPLE)
    finding = nccl_tests.check_bandwidth(result, "g5.48xlarge")
    assert not finding.ok
    assert "no busbw floor for g5.48xlarge" in finding.detail
    assert "p5.48xlarge" in finding.detail
    assert "nccl_busbw.yml" in finding.detail
    assert "--threshold" in finding.detail


def test_packaged_network_floors_are_below_the_two_node_ones():
    floors, table = nccl_tests.load_network_floors(), nccl_tests.load_thresholds()
    assert set(floors) == set(table)
    assert all(0 < floors[name] < table[name][2] for name in floors)
