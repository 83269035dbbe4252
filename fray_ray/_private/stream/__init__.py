"""The stream protocol between a driver and its workers: msgpack frames on one TCP socket.

Frames and batch frames (`frames`), the sending half (`outbox`), the connection (`protocol`),
who reads a connection (`read_lending`, `read_hints`, `spin_wait`), the authenticating front
door (`stream_server`) and reused buffers (`buffers`). It imports nothing else of the runtime.
"""
