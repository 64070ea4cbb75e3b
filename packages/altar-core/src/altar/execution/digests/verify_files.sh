trust=@TRUST@
status=0
record_is() {
  [ -n "$2" ] && [ -f "$1" ] || return 1
  first="" rest=""
  { IFS= read -r first; if IFS= read -r rest || [ -n "$rest" ]; then false; fi; } \
    2>/dev/null <"$1" || return 1
  [ "$first" = "$2" ]
}
for line in "$@"; do
  hex="${line%%  *}"
  path="${line#*  }"
  case "$hex" in
    *[!0-9a-f]*) hex="" ;;
  esac
  if [ "${#hex}" -ne 64 ] || [ "$path" = "$line" ] || [ -z "$path" ]; then
    printf '%s: FAILED\n' "$line"
    printf '%s: malformed; expected "<64 lowercase hex>  <path>"\n' "$line" >&2
    status=1
    continue
  fi
  file="$path"
  case "$file" in
    -*) file="./$file" ;;  # GNU stat reads "-" as standard input
  esac
  if [ ! -f "$file" ]; then
    printf '%s: FAILED\n' "$path"
    printf '%s: not a regular file; a transfer digest covers one file\n' "$path" >&2
    status=1
    continue
  fi
  record="$file.sha256-verified"
  format="verified-file/1 sha256:$hex size=%s mtime=%Y ctime=%Z inode=%i"
  if [ "$trust" = 1 ] && [ -f "$record" ]; then
    before=$(stat -L -c "$format" -- "$file" 2>/dev/null) || before=""
    if record_is "$record" "$before"; then
      printf '%s: OK (verification record)\n' "$path"
      continue
    fi
  fi
  now=$(date +%s) clock=""
  if [ ! -d "$record" ] && tmp=$(mktemp -- "$record.XXXXXX" 2>/dev/null); then
    clock=$(stat -c %Z -- "$tmp" 2>/dev/null) || clock=""
    rm -f -- "$tmp" 2>/dev/null
  fi
  before=$(stat -L -c "$format" -- "$file" 2>/dev/null) || before=""
  actual=$(sha256sum <"$file" 2>/dev/null) || actual=""
  actual="${actual%% *}"
  if [ "$actual" != "$hex" ]; then
    printf '%s: FAILED\n' "$path"
    printf '%s: sha256 is %s; expected %s\n' "$path" "${actual:-unreadable}" "$hex" >&2
    status=1
    continue
  fi
  printf '%s: OK\n' "$path"
  after=$(stat -L -c "$format" -- "$file" 2>/dev/null) || after=""
  ctime="${after##*ctime=}"
  ctime="${ctime%% *}"
  if [ -n "$clock" ] && [ -n "$after" ] && [ "$after" = "$before" ] \
      && [ "$ctime" -lt "$clock" ] 2>/dev/null && [ "$ctime" -lt "$now" ] 2>/dev/null \
      && tmp=$(mktemp -- "$record.XXXXXX" 2>/dev/null); then
    if ! { printf '%s\n' "$after" >"$tmp" && chmod 644 -- "$tmp" \
           && mv -f -- "$tmp" "$record"; } 2>/dev/null; then
      rm -f -- "$tmp" 2>/dev/null
    fi
  fi
done
exit "$status"
