# shellcheck shell=bash
# One line per set-up stage, the whole output in a log file (sourced by scripts/demo.sh and
# scripts/test.sh):
#
#   STAGE_LOG=/path/to/file.log; . scripts/stages.sh
#   stage "installing system packages" scripts/install-system-deps.sh
#
# prints `installing system packages ... done, 1m40s`. A stage that fails prints its last lines
# and the log file's name, and exits with the stage's status.

: "${STAGE_LOG:?set STAGE_LOG before sourcing stages.sh}"
mkdir -p "$(dirname "$STAGE_LOG")"
: > "$STAGE_LOG"

stage_took() {  # stage_took SECONDS -> 8s, 1m40s, 1h02m
  local s=$1
  if [ "$s" -ge 3600 ]; then printf '%dh%02dm' $((s / 3600)) $((s % 3600 / 60))
  elif [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60))
  else printf '%ds' "$s"; fi
}

stage() {  # stage WHAT COMMAND [ARGS...]
  local what=$1 t0=$SECONDS rc=0 start
  shift
  start=$(wc -c < "$STAGE_LOG")
  printf '%s ... ' "$what"
  printf '\n==== %s: %s (%s)\n' "$what" "$*" "$(date -u +%FT%TZ)" >> "$STAGE_LOG"
  "$@" >> "$STAGE_LOG" 2>&1 < /dev/null || rc=$?
  if [ "$rc" -eq 0 ]; then
    printf 'done, %s\n' "$(stage_took $((SECONDS - t0)))"
    return 0
  fi
  printf 'FAILED after %s (exit %d)\n' "$(stage_took $((SECONDS - t0)))" "$rc"
  echo "--- the last lines of its output:"
  tail -c +$((start + 1)) "$STAGE_LOG" | tail -n 25 | sed 's/^/  /'
  echo "--- the whole output is in $STAGE_LOG"
  exit "$rc"
}
