"""The Iris client layer: wire protocol, controller client, task contract, actor RPC.

It knows nothing of Ray or Fray. Generated protobuf and Connect code lives in
`fray_ray.iris.rpc`; everything else here is hand-written.
"""
