#!/bin/sh
# The smoke driver: the one script `check` runs in its sandbox, as it is here
# (compiled into sunaba-images, src/smoke/driver.rs, and run with `sh -c`);
# what it runs comes in as arguments, never as script text.
#
# The image's healthcheck and each lane of cases run side by side (a lane per
# suite, its cases in order: container start-up, not the tools, dominated one
# container per case), each case in its own copy under the workspace, its
# output kept in the container's /tmp; then everything is printed in sections
# framed by a random nonce, so no output can end a section early.
#
# Arguments:
#   NONCE LIMIT CAP WORKSPACE LANES
#       the nonce framing the sections; each case's time limit in seconds
#       (`timeout`, when the image has it); the bytes of a case's output
#       printed (its tail); where the cases' copies are; how many lanes
#   COUNT WORD...
#       the healthcheck: its COUNT words
#   LANE ID COUNT WORD...   (once per case)
#       the case's lane (1 to LANES), its id (its copy's directory under
#       WORKSPACE, the name of its section) and its command, COUNT words
#
# Output: `NONCE id UID GID`, then the sections `hc` (the healthcheck's
# stdout), `hc.err` (its stderr) and one per case, each as
#   NONCE begin NAME
#   <output>
#   NONCE end NAME SIZE EXIT START END [CPU]
# (SIZE: bytes printed in all; START, END: `date +%s%N`; CPU: the lane's
# cumulative `times` of its children), or `NONCE fatal WHY` when it gave up.
set -u
n=$1 limit=$2 cap=$3 workspace=$4 lanes=$5
shift 5
o=/tmp/$n
if ! mkdir -p "$o"; then
	echo "$n fatal cannot create $o in the container"
	exit 0
fi
if command -v timeout >/dev/null 2>&1; then has_timeout=1; else has_timeout=; fi

now() { date +%s%N 2>/dev/null; }

# run_first COUNT WORD...: runs the command of the first COUNT words (the
# words after them are the rest of the arguments).
run_first() {
	count=$1
	shift
	total=$#
	i=0
	for word do
		if [ "$i" -lt "$count" ]; then set -- "$@" "$word"; fi
		i=$((i + 1))
	done
	shift "$total"
	"$@"
}

# run_case ID COUNT WORD...: runs a case's command in its copy, keeping its
# output, and its exit status, start, end and the lane's CPU so far.
run_case() {
	c=$1 words=$2
	shift 2
	s=$(now)
	(
		cd "$workspace/$c" || exit
		if [ -n "$has_timeout" ]; then
			run_first "$((words + 4))" timeout -k 5 "$limit" "$@"
		else
			run_first "$words" "$@"
		fi
	) </dev/null >"$o/$c" 2>&1
	r=$?
	times >"$o/$c.cpu"
	echo "$r $s $(now) $(sed -n 2p "$o/$c.cpu" | tr -d ' ')" >"$o/$c.rc"
}

# run_lane LANE CASES...: the cases of one lane, in order.
run_lane() {
	lane=$1
	shift
	while [ "$#" -gt 0 ]; do
		case_lane=$1 case_id=$2 case_words=$3
		shift 3
		if [ "$case_lane" = "$lane" ]; then run_case "$case_id" "$case_words" "$@"; fi
		shift "$case_words"
	done
}

# show NAME: one section.
show() {
	printf '%s begin %s\n' "$n" "$1"
	tail -c "$cap" "$o/$1" 2>/dev/null
	printf '\n%s end %s %s %s\n' "$n" "$1" "$(wc -c <"$o/$1" 2>/dev/null || echo 0)" "$(cat "$o/$1.rc" 2>/dev/null)"
}

hc_words=$1
shift
{
	s=$(now)
	run_first "$hc_words" "$@" </dev/null >"$o/hc" 2>"$o/hc.err"
	echo "$? $s $(now)" >"$o/hc.rc"
} &
shift "$hc_words"
lane=1
while [ "$lane" -le "$lanes" ]; do
	run_lane "$lane" "$@" &
	lane=$((lane + 1))
done
wait
printf '%s id %s %s\n' "$n" "$(id -u)" "$(id -g)"
show hc
show hc.err
while [ "$#" -gt 0 ]; do
	show "$2"
	shift "$((3 + $3))"
done
