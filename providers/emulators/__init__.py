"""HTTP emulators of Alibaba Cloud ECS (RPC, signature v1), Tencent Cloud CVM (API 3.0,
TC3-HMAC-SHA256) and Huawei Cloud ECS (REST v1, SDK-HMAC-SHA256) over the sandbox cloud, so the real
SDKs and adapters can be driven end to end offline.
"""
