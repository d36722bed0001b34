"""The sandbox cloud: a seeded simulation of a GPU cloud (boot delays, stock-outs, spot reclaims) and
the Provider over it. It poses as AWS, Alibaba Cloud or Tencent Cloud for the demo, the simulator and tests.
"""
