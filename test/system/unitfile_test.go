package system

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serviceUnit is what the install tests take from softnic.service: its
// ExecStart line and its EnvironmentFile, as systemd reads them.
type serviceUnit struct {
	execStart string
	envFile   string // without systemd's "-" (optional) prefix
}

// readServiceUnit parses the [Service] section of a unit file: "key=value"
// lines, comments (# or ;) and empty lines skipped.
func readServiceUnit(path string) (serviceUnit, error) {
	f, err := os.Open(path)
	if err != nil {
		return serviceUnit{}, err
	}
	defer f.Close()
	var u serviceUnit
	section := ""
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			switch strings.TrimSpace(k) {
			case "ExecStart":
				u.execStart = strings.TrimSpace(v)
			case "EnvironmentFile":
				u.envFile = strings.TrimPrefix(strings.TrimSpace(v), "-")
			}
		}
	}
	if u.execStart == "" {
		return u, fmt.Errorf("%s: no ExecStart in [Service]", path)
	}
	return u, nil
}

// readEnvFile parses an EnvironmentFile as systemd does: KEY=VALUE lines,
// a value in double quotes (backslash escapes) or single quotes (literal)
// unquoted, comments and empty lines skipped.
func readEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: %q is no assignment", path, line)
		}
		v = strings.TrimSpace(v)
		switch {
		case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
			if v, err = strconv.Unquote(v); err != nil {
				return nil, fmt.Errorf("%s: %q: %w", path, line, err)
			}
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			v = v[1 : len(v)-1]
		}
		env[strings.TrimSpace(k)] = v
	}
	return env, nil
}

var (
	wholeVar  = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)
	bracedVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

// execArgv is the command systemd runs for an ExecStart line: its words
// (split at blanks; the unit has no quoted words, which this refuses),
// the binary's prefix characters (-@:+!) dropped, a word that is $VAR
// alone replaced by VAR's value split at blanks (none if empty), ${VAR}
// by the value as it is. Specifiers (%i ...) are refused: the unit has
// none, and a test that met one would start something else than systemd.
func execArgv(line string, env map[string]string) ([]string, error) {
	if strings.ContainsAny(line, `%"'\`) {
		return nil, fmt.Errorf("ExecStart %q: specifiers, quotes or escapes this parser does not expand", line)
	}
	var argv []string
	for i, w := range strings.Fields(line) {
		if i == 0 {
			w = strings.TrimLeft(w, "-@:+!")
		}
		if m := wholeVar.FindStringSubmatch(w); m != nil {
			argv = append(argv, strings.Fields(env[m[1]])...)
			continue
		}
		argv = append(argv, bracedVar.ReplaceAllStringFunc(w, func(s string) string {
			return env[bracedVar.FindStringSubmatch(s)[1]]
		}))
	}
	return argv, nil
}

// TestUnitParsing: the helpers read a unit and an environment file the way
// systemd does (systemd.service(5) "Command lines", systemd.exec(5)
// EnvironmentFile).
func TestUnitParsing(t *testing.T) {
	dir := t.TempDir()
	unit := dir + "/x.service"
	require.NoError(t, os.WriteFile(unit, []byte("[Unit]\nExecStart=/wrong\n[Service]\n# c\nEnvironmentFile=-/etc/default/x\n"+
		"ExecStart=-/usr/bin/x daemon $ARGS ${ONE} --y=${ONE}\n[Install]\n"), 0o644))
	u, err := readServiceUnit(unit)
	require.NoError(t, err)
	assert.Equal(t, serviceUnit{execStart: "-/usr/bin/x daemon $ARGS ${ONE} --y=${ONE}", envFile: "/etc/default/x"}, u)
	envPath := dir + "/env"
	require.NoError(t, os.WriteFile(envPath, []byte("# c\n; c\nARGS=\"-d eth0  -d \\\"e1\\\"\"\nONE='a b'\nEMPTY=\n"), 0o644))
	env, err := readEnvFile(envPath)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"ARGS": `-d eth0  -d "e1"`, "ONE": "a b", "EMPTY": ""}, env)
	argv, err := execArgv(u.execStart, env)
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/bin/x", "daemon", "-d", "eth0", "-d", `"e1"`, "a b", "--y=a b"}, argv)
	argv, err = execArgv("/usr/bin/x $EMPTY $NONE end", env)
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/bin/x", "end"}, argv)
	_, err = execArgv("/usr/bin/x -d %i", env)
	assert.Error(t, err)
}
