"""The bash side of the channel: a file the script host puts in `BASH_ENV`, defining the
shell function `orchestrator`. The durable commands (`commands.COMMANDS`) go to the host
over the channel (`channel.py`'s wire format) with bash builtins only, so a command
answered from the journal starts no process; anything else runs the `orchestrator`
program, if there is one on PATH."""

from __future__ import annotations

from functions.sdk.scripts.commands import COMMANDS

__all__ = ["SHIM"]

SHIM = r"""# Defined by the script host: durable commands ask the host over its channel.
orchestrator() {
  case "${1-}" in
    __COMMANDS__) ;;
    *) command orchestrator "$@"; return ;;
  esac
  local __orch_fd __orch_rc __orch_out __orch_err __orch_n __orch_names
  if ! { exec {__orch_fd}<>"/dev/tcp/127.0.0.1/${ORCHESTRATOR_CHANNEL_PORT-0}"; } 2>/dev/null
  then
    printf 'orchestrator %s: the script host cannot be reached (the call has ended)\n' \
      "$1" >&2
    return 70
  fi
  {
    printf '%s\0' "${ORCHESTRATOR_CHANNEL_TOKEN-}" "$PWD" "$#" "$@"
    if [ "$1" = step ] || [ "$1" = lock ]; then
      __orch_names=($(compgen -e))
      printf '%s\0' "${#__orch_names[@]}"
      for __orch_n in "${__orch_names[@]}"; do
        printf '%s=%s\0' "$__orch_n" "${!__orch_n-}"
      done
    fi
  } >&"$__orch_fd"
  if ! { IFS= read -r -d '' __orch_rc && IFS= read -r -d '' __orch_out &&
         IFS= read -r -d '' __orch_err; } <&"$__orch_fd"; then
    exec {__orch_fd}>&-
    printf 'orchestrator %s: the script host hung up\n' "$1" >&2
    return 70
  fi
  exec {__orch_fd}>&-
  printf '%s' "$__orch_out"
  printf '%s' "$__orch_err" >&2
  return "$__orch_rc"
}
""".replace("__COMMANDS__", "|".join(COMMANDS))
