"""What a test host's link does on its own: TCP round trip and one-way throughput, in Python.

Run by bench/scaling.py inside two test hosts (network namespaces): `serve` in one, `rtt` or
`stream` in the other. The round trip includes Python's and the kernel's per-message costs,
as the allreduce's own messages do; the stream sends 1 MiB writes for `--seconds` and the
server reports what it received, so the figure is what one TCP flow gets through the veth,
the bridge and the token bucket.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time

PORT = 5201
CHUNK = 1 << 20


def serve(address: str) -> None:
    """Answer one connection: echo 1-byte pings, or count a stream's bytes and report them."""
    with socket.create_server((address, PORT), reuse_port=True) as server:
        connection, _ = server.accept()
        with connection:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            mode = connection.recv(1)
            if mode == b"p":
                while data := connection.recv(1):
                    connection.sendall(data)
            else:
                received, started = 0, time.perf_counter()
                while data := connection.recv(CHUNK):
                    received += len(data)
                elapsed = time.perf_counter() - started
                print(json.dumps({"bytes": received, "seconds": elapsed}), flush=True)


def _connect(address: str, timeout: float = 10.0) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection = socket.create_connection((address, PORT), timeout=timeout)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return connection
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def rtt(address: str, count: int) -> dict[str, float]:
    """Median and minimum round trip of a 1-byte message, in microseconds."""
    with _connect(address) as connection:
        connection.sendall(b"p")
        times = []
        for _ in range(count):
            started = time.perf_counter()
            connection.sendall(b"x")
            connection.recv(1)
            times.append((time.perf_counter() - started) * 1e6)
    times = times[count // 10:]  # the first are warm-up
    return {"rtt_us_median": statistics.median(times), "rtt_us_min": min(times)}


def stream(address: str, seconds: float) -> dict[str, float]:
    """Bytes written for `seconds`, in Gbit/s as the sender saw them (the server's figure is the check)."""
    payload = bytes(CHUNK)
    sent = 0
    with _connect(address) as connection:
        connection.sendall(b"s")
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            connection.sendall(payload)
            sent += CHUNK
        elapsed = time.perf_counter() - started
    return {"sent_gbit_s": sent * 8 / elapsed / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["serve", "rtt", "stream"])
    parser.add_argument("address")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if args.mode == "serve":
        serve(args.address)
    elif args.mode == "rtt":
        print(json.dumps(rtt(args.address, args.count)), flush=True)
    else:
        print(json.dumps(stream(args.address, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
