"""The tick: reconcile the clouds with the store, plan, launch, reuse warm machines, steer spot jobs,
reap idle machines, take the agents' reports, and write every state change. tick.tick is the
one scheduling code path; the daemon, the demo, the simulator and the tests all drive it.
"""
