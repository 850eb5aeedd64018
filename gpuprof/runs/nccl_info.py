"""What NCCL's own lines in an nccl-tests log say (NCCL_DEBUG=INFO): its version, the NCCL_*
the environment set, and with NCCL_DEBUG_SUBSYS=TUNING the algorithm and protocol NCCL chose
for each call; and where such a message starts inside a line. Stdlib only.

NCCL writes its messages to the same stdout as nccl-tests (unless NCCL_DEBUG_FILE is set), and
nccl-tests prints a row in pieces (the case's columns, then each place's time once measured:
src/common.cu), so the messages of the calls it times land inside the row's line; a launcher
prefixing each rank's output (MPICH's `-prepend-rank`: `[0] `) can prefix them too.

The per-call TUNING line (rank 0 of each communicator, src/enqueue.cc): from NCCL 2.20 to 2.22
`%ld Bytes -> Algo %d proto %d time %f`, in 2.23 with the function's name first (`AllReduce:
...`), from 2.24 `%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}` with the names
(src/collectives.cc ncclAlgoToString, ncclProtoToString); before 2.20 the line is a TRACE only
(a debug build). The numbers are NCCL's enums (src/include/nccl_common.h: NCCL_ALGO_TREE 0,
RING 1, COLLNET_DIRECT 2, COLLNET_CHAIN 3, NVLS 4, NVLS_TREE 5, PAT 6; NCCL_PROTO_LL 0, LL128
1, SIMPLE 2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# NCCL's algorithms and protocols, in its enums' order, as gpuprof's model names them
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("LL", "LL128", "Simple")

NCCL_VERSION = re.compile(r"\b[RN]CCL version (?P<version>\d+\.\d+\.\d+[\w.+-]*)")
TESTS_VERSION = re.compile(
    r"(?:nccl-tests version|rccl-tests: Version) (?P<version>[\w.+:-]+)"
    r"(?:.*nccl-library=(?P<lib>\d+))?"
)
ENV = re.compile(r"\b(?P<name>NCCL_[A-Z0-9_]+) set by environment to (?P<value>\S+)")
# a message's start (src/debug.cc): a launcher's `[0] ` and NCCL's timestamp (`[%F %T] `) if
# any, then `host:pid:tid [device]`, a WARN's or TRACE's source, `NCCL INFO|WARN|TRACE`.
# nccl-tests prints a row's pieces with no space after them (src/util.cu: `%6s` root, `%6g`
# #wrong), so a message can follow a digit directly: a host the rank lines did not name must
# start with a letter to be told from it
_BRACKETS = r"(?:\[[^\]\n]*\]\s*)*"
_AFTER_HOST = r":\d+:\d+\s+\[\d+\][^\[\n]*?\b[RN]CCL (?:INFO|WARN|TRACE)\b"
MESSAGE = re.compile(_BRACKETS + r"[A-Za-z][\w.-]*" + _AFTER_HOST)
CHOICE = re.compile(
    r"\b(?:(?P<func>[A-Za-z]+):\s+)?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
)


def nccl_version(code: int) -> str:
    """NCCL_VERSION_CODE -> 'X.Y.Z' (X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z
    before: nccl.h)."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def message_start(text: str, hosts: Iterable[str] = ()) -> int | None:
    """Where an NCCL message starts in a line (None: the line has none); `hosts`: those the
    rank lines named (a message from one of them is found whatever its name starts with)."""
    named = sorted(set(hosts), key=len, reverse=True)
    if named:
        pattern = f"{_BRACKETS}(?:{'|'.join(re.escape(h) for h in named)}){_AFTER_HOST}"
        found = re.search(pattern, text)
        if found:
            return found.start()
    found = MESSAGE.search(text)
    return found.start() if found else None


def read_versions(text: str, versions: dict[str, str], env: dict[str, str]) -> None:
    """NCCL's and nccl-tests' versions, and NCCL_* set by the environment, where a line prints
    them (the first of each kept)."""
    for pattern, key in ((NCCL_VERSION, "nccl"), (TESTS_VERSION, "nccl_tests")):
        match = pattern.search(text)
        if match and key not in versions:
            versions[key] = match.group("version")
            if key == "nccl_tests" and match.group("lib"):
                versions.setdefault("nccl", nccl_version(int(match.group("lib"))))
            if "RCCL" in text or "rccl-tests" in text:
                versions[key.replace("nccl", "rccl", 1)] = versions.pop(key)
    found = ENV.search(text)
    if found:
        env[found.group("name")] = found.group("value")


def read_choice(text: str) -> str | None:
    """NCCL's choice in a per-call TUNING line, as `algorithm/protocol` in gpuprof's names
    (`tree/LL`), or None (not such a line, or a name NCCL's enums do not have)."""
    found = CHOICE.search(text)
    if not found:
        return None
    algo, proto = found.group("algo"), found.group("proto")
    if algo.isdigit() and proto.isdigit():
        a, p = int(algo), int(proto)
        if a >= len(ALGORITHMS) or p >= len(PROTOCOLS):
            return None
        return f"{ALGORITHMS[a]}/{PROTOCOLS[p]}"
    names = {p.upper(): p for p in PROTOCOLS}
    if algo.lower() not in ALGORITHMS or proto.upper() not in names:
        return None
    return f"{algo.lower()}/{names[proto.upper()]}"
