"""The Ray layer's runtime, a stack of packages read from the bottom up: `stream` (the stream
protocol), `objects` (ids, serialization, the object table and store), `core` (what the API
hands out and what a call carries), `options`, `messages` (what a driver and its workers say),
`observe` (what a run records), then `driver` and `workers` side by side, and `bootstrap`
(building the driver for `init()`) on top. Each imports only those below it; ARCHITECTURE.md,
"The runtime's packages", has the map."""
