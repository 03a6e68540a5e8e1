package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
)

func init() {
	commands = append(commands, &command{
		name:     "version",
		synopsis: "dlock version",
		usage:    "Usage: dlock version (or dlock --version)\n\nPrint dlock's module version and the VCS revision it was built from.\n\nExample:\n  dlock version\n",
		flags:    func(*flag.FlagSet) any { return nil },
		run: func(_ context.Context, e *env, _ any, _ []string) int {
			fmt.Fprintln(e.stdout, versionLine())
			return exitOK
		},
	}, &command{
		name:     "completion",
		synopsis: "dlock completion bash|zsh|fish",
		usage:    completionUsage,
		flags:    func(*flag.FlagSet) any { return nil },
		run:      runCompletion,
		args:     true,
	})
}

// versionLine says which dlock this is, from the build information: the
// module version (v1.2.3, or (devel) for a build from a checkout) and the
// VCS revision, its time and whether the tree was modified.
func versionLine() string {
	version, rev, at, modified := "(unknown)", "", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	s := "dlock " + version
	if rev != "" {
		s += " revision " + rev
		if modified {
			s += " (modified)"
		}
		if at != "" {
			s += " " + at
		}
	}
	return s + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

const completionUsage = `Usage: dlock completion bash|zsh|fish

Print a script that completes dlock's commands and flags in the shell:
  bash:  source <(dlock completion bash)      (in ~/.bashrc)
  zsh:   source <(dlock completion zsh)       (in ~/.zshrc)
  fish:  dlock completion fish > ~/.config/fish/completions/dlock.fish

Exit status: 0, or 2 for a shell it does not know.

Example:
  dlock completion bash > /etc/bash_completion.d/dlock
`

// shells are the shells dlock completion writes scripts for.
var shells = []string{"bash", "zsh", "fish"}

func runCompletion(_ context.Context, e *env, _ any, args []string) int {
	c := lookup("completion")
	if len(args) != 1 {
		return usageError(e, c, "give one shell: %s", strings.Join(shells, ", "))
	}
	switch args[0] {
	case "bash":
		writeBash(e.stdout)
	case "zsh":
		// zsh runs bash completion functions through bashcompinit.
		fmt.Fprint(e.stdout, "#compdef dlock\nautoload -U +X bashcompinit && bashcompinit\n")
		writeBash(e.stdout)
	case "fish":
		writeFish(e.stdout)
	default:
		return usageError(e, c, "unknown shell %q; dlock completes %s", args[0], strings.Join(shells, ", "))
	}
	return exitOK
}

// flagWords returns the spellings of command c's flags: -n, --nb, ...
func flagWords(c *command) []string {
	var words []string
	for _, o := range c.order {
		names, _, _ := strings.Cut(o, " ")
		for _, n := range strings.Split(names, "|") {
			if len(n) == 1 {
				words = append(words, "-"+n)
			} else {
				words = append(words, "--"+n)
			}
		}
	}
	return words
}

func writeBash(w io.Writer) {
	fmt.Fprintf(w, `_dlock() {
    local cur=${COMP_WORDS[COMP_CWORD]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "%s help --version" -- "$cur"))
        return
    fi
    local flags=""
    case ${COMP_WORDS[1]} in
`, strings.Join(commandList(), " "))
	for _, c := range commands {
		words := flagWords(c)
		if c.name == "completion" {
			words = shells
		}
		if c.name == "help" {
			continue
		}
		fmt.Fprintf(w, "    %s) flags=%q ;;\n", c.name, strings.Join(words, " "))
	}
	fmt.Fprintf(w, `    help) flags=%q ;;
    esac
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
}
complete -o default -F _dlock dlock
`, strings.Join(commandList(), " "))
}

func writeFish(w io.Writer) {
	fmt.Fprintln(w, "complete -c dlock -f")
	for _, c := range commands {
		fmt.Fprintf(w, "complete -c dlock -n __fish_use_subcommand -a %s -d %q\n", c.name, commandSummary[c.name])
	}
	fmt.Fprintf(w, "complete -c dlock -n __fish_use_subcommand -a help -d %q\n", "show help")
	fmt.Fprintf(w, "complete -c dlock -n '__fish_seen_subcommand_from completion' -a %q\n", strings.Join(shells, " "))
	fmt.Fprintf(w, "complete -c dlock -n '__fish_seen_subcommand_from help' -a %q\n", strings.Join(commandList(), " "))
	for _, c := range commands {
		for _, o := range c.order {
			names, arg, _ := strings.Cut(o, " ")
			line := fmt.Sprintf("complete -c dlock -n '__fish_seen_subcommand_from %s'", c.name)
			for _, n := range strings.Split(names, "|") {
				if len(n) == 1 {
					line += " -s " + n
				} else {
					line += " -l " + n
				}
			}
			if arg != "" {
				line += " -r"
			}
			fmt.Fprintln(w, line)
		}
	}
	// Commands after a lock name: files and programs.
	fmt.Fprintln(w, "complete -c dlock -n '__fish_seen_subcommand_from run elect' -F")
}

func commandList() []string {
	names := make([]string, 0, len(commands))
	for _, c := range commands {
		names = append(names, c.name)
	}
	return slices.Clip(names)
}
