#!/usr/bin/env bash
# Windows, run rather than compiled: the pool-core and pool-topo tests (unit,
# integration, doc) and pool-matvec's kernel and row-job tests, built for
# x86_64-pc-windows-gnu by Debian's mingw-w64 and run under Debian's Wine
# (installs both and the Rust target when missing). Affinity, pinning and
# thread ids are the Windows calls (SetThreadAffinityMask,
# GetProcessAffinityMask, GetCurrentThreadId), so those tests run for real;
# tests of Linux-only features (fork, /proc, sysfs, cgroups, NUMA page
# placement) are not built there, and the stage lists them at the end.
# Wine 8 lacks bcryptprimitives.dll, which Rust's std imports: a stand-in
# built from scripts/wine/bcryptprimitives.c goes into the prefix.
# Cost: ~4-5 min on 2 cores (~1.5 min of it the apt install on a fresh
# machine, ~2 min the Windows build).
set -euo pipefail
target=x86_64-pc-windows-gnu
wine=/usr/lib/wine/wine64
if [[ ! -x $wine ]] || ! command -v x86_64-w64-mingw32-gcc >/dev/null; then
    echo "installing wine64 and gcc-mingw-w64-x86-64 (apt)"
    sudo_cmd=""; [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
        wine64 gcc-mingw-w64-x86-64 >/dev/null
fi
rustup target list --installed | grep -q "^$target$" || rustup target add "$target"

export WINEDEBUG=-all
export WINEPREFIX="$PWD/target/wine-prefix"
if [[ ! -f $WINEPREFIX/system.reg ]]; then
    echo "creating the Wine prefix $WINEPREFIX"
    "$wine" wineboot --init >/dev/null 2>&1 || true
    "$wine" wineserver -w 2>/dev/null || /usr/lib/wine/wineserver -w || true
fi
# One wineserver for the whole stage: by default it exits a few seconds
# after its last client, and a test binary starting just then found it
# gone ("wine client error:0: recvmsg: Connection reset by peer").
/usr/lib/wine/wineserver -p
trap '/usr/lib/wine/wineserver -k 2>/dev/null || true' EXIT
x86_64-w64-mingw32-gcc -shared -O2 -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
    scripts/wine/bcryptprimitives.c -ladvapi32

export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER="$PWD/scripts/wine/run.sh"
export CARGO_TARGET_DIR=target/windows
cargo test --target "$target" -p pool-topo -p pool-core
cargo test --target "$target" -p pool-matvec --lib \
    --test kernels --test map_reduce --test rows --test serial_gate

# What Windows does not build, by name (tests of Linux-only features).
list() { cargo test "$@" -p pool-topo -p pool-core -- --list 2>/dev/null | grep ': test$' | sort -u; }
comm -23 <(CARGO_TARGET_DIR=target list) <(list --target "$target") \
    | sed 's/: test$//; s/^/not built for Windows (a Linux-only feature): /'
