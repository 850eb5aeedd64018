#!/usr/bin/env bash
# Emulate a small cluster on one machine: one network namespace per "node", all joined through
# a bridge in a "switch" namespace by veth pairs, each node's link shaped with tc tbf.
#
#   scripts/netns-cluster.sh up NODES RATE [NODE:RATE ...]   e.g. up 2 200mbit   or up 3 200mbit 2:100mbit
#   scripts/netns-cluster.sh mesh NODES RATE [A-B:RATE ...]  a direct link per pair, e.g. mesh 3 200mbit 1-2:100mbit
#   scripts/netns-cluster.sh reshape NODES RATE              every node link (up) to a new rate
#   scripts/netns-cluster.sh exec K COMMAND...               run COMMAND inside node K
#   scripts/netns-cluster.sh addr K                          node K's address
#   scripts/netns-cluster.sh netem                           exit 0 if netem (delay) is available
#   scripts/netns-cluster.sh down                            remove everything (always safe)
#
# Node K is namespace ${GPNS_PREFIX}n$K with interface ${GPNS_PREFIX}e$K at 10.213.0.(K+1)/24
# (mesh: interface ${GPNS_PREFIX}d$K at 10.213.1.(K+1), reached over one shaped link per pair);
# GPNS_PREFIX (default gp) keeps concurrent clusters apart. Traffic between two nodes crosses
# two shaped links (the sender's and the receiver's), each limited in its egress direction
# with tbf: that rate is what the pair gets. GPNS_QUEUE (tbf latency, default 400ms) is how
# long a packet may wait in a link's queue: a shallow queue (say 20ms) keeps the ACKs of one
# direction from waiting behind the other direction's data, as a switch's small buffers do.
# Needs root and iproute2.
set -euo pipefail
P=${GPNS_PREFIX:-gp}
SW=${P}sw

addr() { echo "10.213.0.$(($1 + 1))"; }

shape() {  # namespace device rate
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst 64kb latency "${GPNS_QUEUE:-400ms}"
}

up() {
    local nodes=$1 rate=$2; shift 2
    declare -A custom=()
    for spec in "$@"; do custom[${spec%%:*}]=${spec#*:}; done
    ip netns add "$SW"
    ip -n "$SW" link add br0 type bridge
    ip -n "$SW" link set br0 up
    ip -n "$SW" link set lo up
    for ((k = 0; k < nodes; k++)); do
        local ns=${P}n$k node_if=${P}e$k sw_if=${P}b$k r=${custom[$k]:-$rate}
        ip netns add "$ns"
        ip link add "$node_if" type veth peer name "$sw_if"
        ip link set "$node_if" netns "$ns"
        ip link set "$sw_if" netns "$SW"
        ip -n "$SW" link set "$sw_if" master br0 up
        ip -n "$ns" addr add "$(addr "$k")/24" dev "$node_if"
        ip -n "$ns" link set "$node_if" up
        ip -n "$ns" link set lo up
        shape "$ns" "$node_if" "$r"
        shape "$SW" "$sw_if" "$r"
    done
}

reshape() {  # nodes rate: every node's link (both ends) to a new rate, the cluster kept
    local nodes=$1 rate=$2
    for ((k = 0; k < nodes; k++)); do
        shape "${P}n$k" "${P}e$k" "$rate"
        shape "$SW" "${P}b$k" "$rate"
    done
}

mesh() {
    local nodes=$1 rate=$2; shift 2
    declare -A custom=()
    for spec in "$@"; do custom[${spec%%:*}]=${spec#*:}; done
    for ((k = 0; k < nodes; k++)); do
        local ns=${P}n$k
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
        # the node's own address lives on one end of a veth pair kept inside the namespace
        ip link add "${P}d$k" type veth peer name "${P}x$k"
        ip link set "${P}d$k" netns "$ns"
        ip link set "${P}x$k" netns "$ns"
        ip -n "$ns" addr add "10.213.1.$((k + 1))/32" dev "${P}d$k"
        ip -n "$ns" link set "${P}d$k" up
        ip -n "$ns" link set "${P}x$k" up
    done
    for ((i = 0; i < nodes; i++)); do
        for ((j = i + 1; j < nodes; j++)); do
            local a=${P}l$i$j b=${P}l$j$i net="10.214.$((i * 16 + j))" r=${custom[$i-$j]:-$rate}
            ip link add "$a" type veth peer name "$b"
            ip link set "$a" netns "${P}n$i"
            ip link set "$b" netns "${P}n$j"
            ip -n "${P}n$i" addr add "$net.1/30" dev "$a"
            ip -n "${P}n$j" addr add "$net.2/30" dev "$b"
            ip -n "${P}n$i" link set "$a" up
            ip -n "${P}n$j" link set "$b" up
            ip -n "${P}n$i" route add "10.213.1.$((j + 1))/32" via "$net.2" dev "$a"
            ip -n "${P}n$j" route add "10.213.1.$((i + 1))/32" via "$net.1" dev "$b"
            shape "${P}n$i" "$a" "$r"
            shape "${P}n$j" "$b" "$r"
        done
    done
}

down() {
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^${P}(n[0-9]+|sw|probe[0-9]+)$" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns delete "$ns"
    done
}

netem() {
    local ns=${P}probe$$ rc=0
    ip netns add "$ns"
    ip netns exec "$ns" tc qdisc add dev lo root netem delay 1ms 2>/dev/null || rc=1
    ip netns delete "$ns"
    return $rc
}

case "${1:-}" in
    up) shift; up "$@" ;;
    mesh) shift; mesh "$@" ;;
    reshape) shift; reshape "$@" ;;
    down) down ;;
    exec) k=$2; shift 2; exec ip netns exec "${P}n$k" "$@" ;;
    addr) addr "$2" ;;
    netem) netem ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
esac
