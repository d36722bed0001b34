"""HTTP faces of the sandbox cloud: each speaks one real cloud's wire protocol on 127.0.0.1.

The vendor SDKs talk to them over real HTTP, so an adapter's request building,
signing, paging and error parsing are exercised for real, while the market
behind them (stock, boot delays, reclaims, client-token idempotency, injected
faults) is ``providers.sandbox.SandboxCloud``'s.
"""
