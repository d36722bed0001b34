"""The tick in simulated time: the sandbox demo, the month simulator and its traces, the simulated
on-instance agent, the linear-programming lower bound, and the spot-trace benchmark (spotbench).
"""
