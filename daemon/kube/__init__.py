"""The real Cluster: the only package that imports kubernetes_asyncio.

Watches turn raw objects into typed events at the border (`observe`), actuations patch Jobs idempotently
(`actuate`), and `errors` sorts API failures into temporary and permanent ones.
"""
