"""A byte forwarder for tests that let the API server reach a daemon on loopback: `tcp HOST PORT UNIX` listens on
TCP and forwards each connection to a UNIX socket; `unix UNIX HOST PORT` listens on the UNIX socket and forwards to
TCP. A UNIX socket crosses network namespaces, so one half runs in a namespace the test made (where the API
server's connection to a pod IP arrives) and the other beside the daemon. Runs until killed."""

from __future__ import annotations

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main(argv: list[str]) -> None:
    mode = argv[0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if mode == "tcp":
            up_reader, up_writer = await asyncio.open_unix_connection(argv[3])
        else:
            up_reader, up_writer = await asyncio.open_connection(argv[2], int(argv[3]))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    if mode == "tcp":
        server = await asyncio.start_server(serve, argv[1], int(argv[2]))
    else:
        server = await asyncio.start_unix_server(serve, argv[1])
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
