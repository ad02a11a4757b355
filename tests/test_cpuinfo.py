"""harness.cpuinfo: /proc/cpuinfo parsed once, for the manifest's cpu_model and the host spec's ISA flags."""

from harness.cpuinfo import cpuinfo, parse_cpuinfo
from harness.records import cpu_model
from harness.specs.host import detect_host

TEXT = """processor\t: 0
model name\t: Example CPU @ 2.00GHz
cpu MHz\t\t: 1999.998
flags\t\t: fpu avx2 fma
processor\t: 1
model name\t: Other
flags\t\t: fpu
"""


def test_first_cpu_wins_and_missing_fields_fall_back():
    info = parse_cpuinfo(TEXT)
    assert info.model == "Example CPU @ 2.00GHz" and info.flags == {"fpu", "avx2", "fma"} and info.mhz == 1999.998
    empty = parse_cpuinfo("")
    assert empty.model and empty.flags == frozenset() and empty.mhz is None


def test_manifest_and_host_spec_read_the_same_parse():
    assert cpu_model() == cpuinfo().model == detect_host().cpu_model
