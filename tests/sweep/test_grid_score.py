"""Sweep grid parsing and scoring (Chapter 19, §19.7 reward): pure functions, exact values."""

import pytest

from harness.errors import HarnessError
from harness.sweep.grid import expand, label, parse_axis
from harness.sweep.score import ScoredPoint, best_point, pareto_front, reward


def test_axis_values_are_typed():
    a = parse_axis("llama_cpp.batch_size=64,256")
    assert a.keys == ("llama_cpp.batch_size",) and a.values == (64, 256)
    assert parse_axis("mode=pd,colocated").values == ("pd", "colocated")
    assert parse_axis("x=0.5,true").values == (0.5, True)


def test_linked_keys_take_one_value():
    pts = expand([parse_axis("llama_cpp.batch_size+llama_cpp.ubatch_size=64,512"), parse_axis("llama_cpp.parallel=1,4")])
    assert pts == [
        {"llama_cpp.batch_size": 64, "llama_cpp.ubatch_size": 64, "llama_cpp.parallel": 1},
        {"llama_cpp.batch_size": 64, "llama_cpp.ubatch_size": 64, "llama_cpp.parallel": 4},
        {"llama_cpp.batch_size": 512, "llama_cpp.ubatch_size": 512, "llama_cpp.parallel": 1},
        {"llama_cpp.batch_size": 512, "llama_cpp.ubatch_size": 512, "llama_cpp.parallel": 4},
    ]
    assert label(pts[0]) == "llama_cpp.batch_size=64 llama_cpp.ubatch_size=64 llama_cpp.parallel=1"
    assert expand([]) == [{}] and label({}) == "default"


@pytest.mark.parametrize("text,match", [
    ("batch_size", "KEY=V1,V2"), ("=1,2", "KEY=V1,V2"), ("a=1,,2", "empty value"), ("a=1,1", "appears twice"),
    ("a+a=1", "key appears twice"),
])
def test_bad_axis(text, match):
    with pytest.raises(HarnessError, match=match):
        parse_axis(text)


def test_key_on_two_axes_and_too_many_points():
    with pytest.raises(HarnessError, match="two --grid"):
        expand([parse_axis("a=1,2"), parse_axis("a+b=3")])
    with pytest.raises(HarnessError, match="more than 256"):
        expand([parse_axis("a=" + ",".join(map(str, range(20)))), parse_axis("b=" + ",".join(map(str, range(20))))])


def test_reward_is_the_chapter_formula():
    # §19.7: reward = tokens/s − λ·max(0, latency − SLA)
    assert reward(1000.0, 0.8, 1.0, 500.0) == 1000.0  # within the SLA: no penalty
    assert reward(1000.0, 1.5, 1.0, 500.0) == pytest.approx(750.0)
    assert reward(1000.0, 1.5, 1.0, 0.0) == 1000.0
    with pytest.raises(HarnessError, match="--lambda"):
        reward(1.0, 1.0, 1.0, -1.0)
    with pytest.raises(HarnessError, match="--sla-s"):
        reward(1.0, 1.0, 0.0, 1.0)


def _p(i, tps, p95, r=None, valid=True):
    return ScoredPoint(i, f"p{i}", tps, p95, tps if r is None else r, None, valid)


def test_pareto_front_and_best():
    pts = [_p(0, 100, 1.0), _p(1, 120, 2.0), _p(2, 90, 1.5), _p(3, 120, 2.5), _p(4, 80, 0.5)]
    assert [p.index for p in pareto_front(pts)] == [4, 0, 1]  # 2 is beaten by 0, 3 by 1
    assert best_point(pts).index in (1, 3) and best_point(pts).index == 1  # tie on reward: lower p95
    # an invalid run wins only when nothing valid exists
    assert best_point([_p(0, 10, 1.0), _p(1, 99, 1.0, valid=False)]).index == 0
    assert best_point([_p(1, 99, 1.0, valid=False)]).index == 1
    with pytest.raises(HarnessError, match="no point"):
        best_point([])
