package main

// getopt walks a command line as POSIX getopt(3) does for the C tools
// whose options softnic copies exactly (rping): single-letter options
// that may be grouped ("-vV"), an argument attached ("-S64") or in the
// next word ("-S 64"), "--" ending the options; other words are skipped,
// as GNU getopt permutes them to the end.
type getopt struct {
	spec map[byte]bool // option letter -> takes an argument
	args []string
	i, j int // the word, and the letter within it
}

// newGetopt parses an optstring such as "a:I:sc" (a colon after a letter
// that takes an argument).
func newGetopt(optstring string, args []string) *getopt {
	g := &getopt{spec: map[byte]bool{}, args: args}
	for k := 0; k < len(optstring); k++ {
		takes := k+1 < len(optstring) && optstring[k+1] == ':'
		g.spec[optstring[k]] = takes
		if takes {
			k++
		}
	}
	return g
}

// next returns the next option and its argument; ok is false at the end.
// An unknown option, or one missing its argument, comes back as '?'
// (getopt's answer when opterr is 0).
func (g *getopt) next() (opt byte, arg string, ok bool) {
	for g.j == 0 {
		if g.i >= len(g.args) {
			return 0, "", false
		}
		w := g.args[g.i]
		switch {
		case w == "--":
			g.i = len(g.args)
		case len(w) > 1 && w[0] == '-':
			g.j = 1
		default:
			g.i++ // not an option
		}
	}
	w := g.args[g.i]
	opt = w[g.j]
	g.j++
	takes, known := g.spec[opt]
	if !known || opt == ':' {
		g.endLetter(w)
		return '?', "", true
	}
	if !takes {
		g.endLetter(w)
		return opt, "", true
	}
	if g.j < len(w) { // attached
		arg = w[g.j:]
	} else if g.i+1 < len(g.args) {
		g.i++
		arg = g.args[g.i]
	} else {
		g.i, g.j = len(g.args), 0
		return '?', "", true
	}
	g.i, g.j = g.i+1, 0
	return opt, arg, true
}

// endLetter moves past the letter just read, to the next word when it was
// the word's last.
func (g *getopt) endLetter(w string) {
	if g.j >= len(w) {
		g.i, g.j = g.i+1, 0
	}
}

// atoi is C's atoi: optional blanks and sign, then digits up to the
// first non-digit; 0 when there are none. It saturates instead of
// overflowing.
func atoi(s string) int {
	k := 0
	for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n') {
		k++
	}
	neg := false
	if k < len(s) && (s[k] == '+' || s[k] == '-') {
		neg = s[k] == '-'
		k++
	}
	n := 0
	for ; k < len(s) && s[k] >= '0' && s[k] <= '9'; k++ {
		if n < 1<<40 {
			n = n*10 + int(s[k]-'0')
		}
	}
	if neg {
		return -n
	}
	return n
}
