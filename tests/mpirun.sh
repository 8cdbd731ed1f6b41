#!/bin/sh
# Runs an MPI test program on N ranks of this machine under a time limit,
# so that a hang fails instead of blocking the suite:
#   tests/mpirun.sh N SECONDS PROGRAM [ARGS...]
# Handles what mpirun needs here: --oversubscribe (more ranks than cores),
# --allow-run-as-root when run as root (containers), shared memory for the
# transport, and no CMA single copy (ptrace is often forbidden in
# containers). Exit status: the program's (nonzero if any rank failed),
# 124 on a timeout.
set -u
n=$1
secs=$2
shift 2
flags="--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none"
if [ "$(id -u)" = 0 ]; then
  flags="$flags --allow-run-as-root"
fi
# shellcheck disable=SC2086
exec timeout -k 10 "$secs" mpirun $flags -np "$n" "$@"
