"""The records of a closed-loop run (kind loop-cpu, loop-gpu): what harness.loop writes and harness.report reads.

Below the use-case layer so that a renderer reads a stored loop run without importing the loop that made it: the
report (`report.LoopReport`, loop_report.json, versioned with upgrade steps), the isolated stages (`stages`), the stage
windows (`windows`), the served steps (`steps`) and the two verdicts with their intervals (`verdict`). The served
points themselves are harness.served's records.
"""
