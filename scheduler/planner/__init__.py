"""The planner: queued jobs x offers x our fleet -> one decision per job, with its reason and runners-up.
Pure: no I/O, no store, no clock, no globals. plan.plan is the entry point; allowed is what a job file
allows, cost what a candidate is expected to cost, book the candidates of one plan() call, rank how one
job scores them and heap their order, best first; fallback what a job refused by its deadline runs on
instead (the tick and `gpusched plan` ask it); spot_rule is the spot-under-deadline rule that steering
and the spot-trace benchmark share.
"""
