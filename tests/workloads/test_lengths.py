"""Token-length distributions: parsing errors name the flag, samples are seeded, clipped and match their moments."""

import numpy as np
import pytest

from harness.errors import HarnessError
from workloads.lengths import parse_length


def test_forms_parse():
    assert parse_length("512", "--input-tokens").describe() == "512"
    assert parse_length("fixed:value=7", "--x").sample(3, np.random.default_rng(0)).tolist() == [7, 7, 7]
    u = parse_length("uniform:min=10,max=12", "--x").sample(2000, np.random.default_rng(0))
    assert set(u.tolist()) == {10, 11, 12}


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
def test_moments_and_clipping(kind):
    d = parse_length(f"{kind}:mean=500,stdev=100,min=300,max=900", "--x")
    x = d.sample(20000, np.random.default_rng(1))
    assert x.min() >= 300 and x.max() <= 900 and x.dtype.kind == "i"
    assert abs(x.mean() - 500) < 10 and abs(x.std() - 100) < 10  # clipping at 2σ/4σ moves the moments little
    assert (d.sample(50, np.random.default_rng(2)) == d.sample(50, np.random.default_rng(2))).all()


@pytest.mark.parametrize("text,needle", [
    ("abc", "--input-tokens 'abc'"), ("gauss:mean=1,stdev=1", "unknown"), ("normal:mean=5", "needs mean=M,stdev=S"),
    ("uniform:min=5", "needs min=A,max=B"), ("normal:mean=5,stdev=1,foo=2", "takes"), ("1e20", "integer token count"),
    ("normal:mean=5000,stdev=1,max=10", "outside"), ("12.5", "--input-tokens"),
])
def test_bad_values_name_the_flag(text, needle):
    with pytest.raises(HarnessError, match="--input-tokens") as e:
        parse_length(text, "--input-tokens")
    assert needle in str(e.value)
