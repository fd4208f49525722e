# Measuring helpers shared by bench/compare.sh and bench/scaling.sh (sourced, not run). Both
# need `tmp`, a scratch directory of the caller's.

# timed_run FILE CMD...: runs CMD (its stdout discarded, its stderr in $tmp/err) and appends
# "elapsed_s user_s rss_kb" to FILE; fails as CMD does. Elapsed time comes from bash's
# microsecond clock around the command (GNU time prints hundredths of a second, 6% of a 0.16 s
# run); user CPU time and peak RSS come from GNU time.
timed_run() {
  local into=$1; shift
  local start=$EPOCHREALTIME
  /usr/bin/time -f "%U %M" -o "$tmp/time" "$@" >/dev/null 2>"$tmp/err" || return 1
  local end=$EPOCHREALTIME
  awk -v a="$start" -v b="$end" '{printf "%.4f %s %s\n", b - a, $1, $2}' "$tmp/time" >>"$into"
}

# median FILE COLUMN: the median of a column of numbers.
median() { sort -g -k"$2","$2" "$1" | awk -v c="$2" '{v[NR]=$c} END{print v[int((NR+1)/2)]}'; }
