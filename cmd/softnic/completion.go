package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"
)

func init() {
	register("completion", "print a shell completion script: eval \"$(softnic completion bash)\"", runCompletion)
}

const completionUsage = `usage: softnic completion bash

Prints a bash completion script for softnic: its commands, each command's
flags, perf's tests, and after -d the devices the daemons of the run
directory serve ($SOFTNIC_RUN_DIR or --run-dir, else /run/softnic; the
daemon's -d: the interfaces). Load it in this shell with
  eval "$(softnic completion bash)"
or for every shell, as root:
  softnic completion bash > /etc/bash_completion.d/softnic
`

func runCompletion(args []string, stdout, stderr io.Writer) int {
	switch {
	case wantsHelp(args):
		fmt.Fprint(stdout, completionUsage)
		return 0
	case len(args) != 1 || args[0] != "bash":
		fmt.Fprint(stderr, completionUsage)
		return 2
	}
	if err := bashCompletion(stdout); err != nil {
		fmt.Fprintf(stderr, "softnic completion: %v\n", err)
		return 1
	}
	return 0
}

// cmdCompletion is what the script offers for one command.
type cmdCompletion struct {
	Name string
	// Flags are every flag name; Valued, those that take a value.
	Flags, Valued string
}

// commandFlags reads a command's flags from its -h, the one description of
// them there is (each command defines its flags as it runs): printFlags'
// lines ("  -s, --size int" over a "    \t" description) and rping's
// ("\t-S size \tping data size").
func commandFlags(args ...string) (flags, valued []string) {
	var help bytes.Buffer
	run(append(args, "-h"), &help, &help)
	lines := strings.Split(help.String(), "\n")
	for i, l := range lines {
		var spec string
		switch {
		case strings.HasPrefix(l, "  -") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    \t"):
			spec = l
		case strings.HasPrefix(l, "\t-"):
			spec, _, _ = strings.Cut(l[1:], "\t")
		default:
			continue
		}
		names, arg := splitFlagSpec(spec)
		flags = append(flags, names...)
		if arg {
			valued = append(valued, names...)
		}
	}
	return flags, valued
}

var flagName = regexp.MustCompile(`^--?[A-Za-z0-9][A-Za-z0-9_-]*$`)

// splitFlagSpec splits "-s, --size int" into its names and whether an
// argument follows them.
func splitFlagSpec(spec string) (names []string, arg bool) {
	for _, f := range strings.Fields(spec) {
		name := strings.TrimSuffix(f, ",")
		if !flagName.MatchString(name) {
			return names, len(names) > 0
		}
		names = append(names, name)
	}
	return names, false
}

// completions lists each command with its flags (stat with stat res's).
func completions() []cmdCompletion {
	var cs []cmdCompletion
	for name := range commands {
		flags, valued := commandFlags(name)
		if name == "stat" {
			f, v := commandFlags("stat", "res")
			flags, valued = append(flags, f...), append(valued, v...)
		}
		sort.Strings(flags)
		sort.Strings(valued)
		cs = append(cs, cmdCompletion{Name: name, Flags: strings.Join(slices.Compact(flags), " "),
			Valued: strings.Join(slices.Compact(valued), " ")})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	return cs
}

func bashCompletion(w io.Writer) error {
	var names []string
	for _, c := range completions() {
		names = append(names, c.Name)
	}
	names = append(names, "help")
	sort.Strings(names)
	return bashTemplate.Execute(w, map[string]any{
		"Commands": strings.Join(names, " "),
		"Each":     completions(),
		"Tests":    "write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat",
	})
}

var bashTemplate = template.Must(template.New("bash").Parse(`# bash completion for softnic: eval "$(softnic completion bash)"

# _softnic_devices: the devices the daemons of the run directory serve
# (NAME.sock): --run-dir on the line, else $SOFTNIC_RUN_DIR, else /run/softnic.
_softnic_devices() {
	local dir=${SOFTNIC_RUN_DIR:-/run/softnic} i f
	for ((i = 2; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		--run-dir) dir=${COMP_WORDS[i+1]} ;;
		--run-dir=*) dir=${COMP_WORDS[i]#--run-dir=} ;;
		esac
	done
	for f in "$dir"/*.sock; do
		[[ -e $f ]] || continue
		f=${f##*/}
		printf '%s\n' "${f%.sock}"
	done
}

_softnic() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	local cmd=${COMP_WORDS[1]} flags="" valued="" i
	COMPREPLY=()
	if ((COMP_CWORD == 1)); then
		COMPREPLY=($(compgen -W "{{.Commands}}" -- "$cur"))
		return
	fi
	case $cmd in
{{- range .Each}}
	{{.Name}}) flags="{{.Flags}}" valued="{{.Valued}}" ;;
{{- end}}
	esac
	if [[ $cmd == exec ]]; then
		for ((i = 2; i < COMP_CWORD; i++)); do
			if [[ ${COMP_WORDS[i]} == -- ]]; then
				if ((i == COMP_CWORD - 1)); then
					COMPREPLY=($(compgen -c -- "$cur"))
				else
					COMPREPLY=($(compgen -f -- "$cur"))
				fi
				return
			fi
		done
	fi
	if [[ " $valued " == *" $prev "* ]]; then
		case $cmd,$prev in
		daemon,-d) COMPREPLY=($(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")) ;;
		*,-d | *,--ib-dev) COMPREPLY=($(compgen -W "$(_softnic_devices)" -- "$cur")) ;;
		*,--run-dir) COMPREPLY=($(compgen -d -- "$cur")) ;;
		*) COMPREPLY=($(compgen -f -- "$cur")) ;;
		esac
		return
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
		return
	fi
	case $cmd,$COMP_CWORD in
	perf,2) COMPREPLY=($(compgen -W "{{.Tests}}" -- "$cur")) ;;
	stat,2) COMPREPLY=($(compgen -W "res" -- "$cur")) ;;
	stat,3) [[ $prev == res ]] && COMPREPLY=($(compgen -W "cm_id" -- "$cur")) ;;
	help,2) COMPREPLY=($(compgen -W "{{.Commands}}" -- "$cur")) ;;
	completion,2) COMPREPLY=($(compgen -W "bash" -- "$cur")) ;;
	inspect,*) COMPREPLY=($(compgen -f -- "$cur")) ;;
	esac
}
complete -F _softnic softnic
`))
