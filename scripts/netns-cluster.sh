#!/usr/bin/env bash
# Emulate a small cluster on one machine: one network namespace per "node", all joined through
# a bridge in a "switch" namespace by veth pairs, each node's link shaped with tc tbf.
#
#   scripts/netns-cluster.sh up NODES RATE [NODE:RATE ...]   e.g. up 2 200mbit   or up 3 200mbit 2:100mbit
#   scripts/netns-cluster.sh exec K COMMAND...               run COMMAND inside node K
#   scripts/netns-cluster.sh addr K                          node K's address
#   scripts/netns-cluster.sh netem                           exit 0 if netem (delay) is available
#   scripts/netns-cluster.sh down                            remove everything (always safe)
#
# Node K is namespace ${GPNS_PREFIX}n$K with interface ${GPNS_PREFIX}e$K at 10.213.0.(K+1)/24;
# GPNS_PREFIX (default gp) keeps concurrent clusters apart. Traffic between two nodes crosses
# two shaped links (the sender's and the receiver's), each limited in its egress direction
# with tbf: that rate is what the pair gets. Needs root and iproute2.
set -euo pipefail
P=${GPNS_PREFIX:-gp}
SW=${P}sw

addr() { echo "10.213.0.$(($1 + 1))"; }

shape() {  # namespace device rate
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst 64kb latency 400ms
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
    down) down ;;
    exec) k=$2; shift 2; exec ip netns exec "${P}n$k" "$@" ;;
    addr) addr "$2" ;;
    netem) netem ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
esac
