"""The offline benchmark of the spot rule on published AWS spot availability traces."""

MAX_STARTS = 100_000  # start points per trace: 10**12 would run for days (the CLI's bound too, without numpy)
