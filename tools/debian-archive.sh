# tools/debian-archive.sh - sourced by tools/ft-python and tools/check-headers:
# a private apt configuration for another Debian suite, leaving the
# machine's own apt configuration untouched.
#
#   archive_uri              the Debian archive URI the machine's own apt
#                            sources name (so no host is named here)
#   private_apt WORK LIST    sets APT_OPTS to use source list LIST and state
#                            under WORK (lists, cache), with timeouts

archive_uri() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -e "$f" ] || continue
        awk '/^URIs:/ {uri=$2} /^Suites:/ {s=$0}
             /^$/ {if (uri ~ /debian\/?$/ && s !~ /security/) {print uri; exit} uri=""; s=""}
             END {if (uri ~ /debian\/?$/ && s !~ /security/) print uri}' "$f"
    done
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk '$1 == "deb" && $2 ~ /debian\/?$/ {print $2}'
    return 0
}

private_apt() {
    local work=$1 list=$2
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
    APT_OPTS=(-o "Dir::Etc::sourcelist=$list" -o "Dir::Etc::sourceparts=-"
              -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
              -o "APT::Get::List-Cleanup=0"
              -o "Acquire::http::Timeout=60" -o "Acquire::Retries=2")
}
