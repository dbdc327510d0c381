package web

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// Access says who may acknowledge findings, the server's only write:
// holders of a bearer token, or users with a password, each with the
// identity their acknowledgements are recorded and logged under. Reading
// needs no credentials. A nil *Access refuses every write.
type Access struct {
	tokens map[[sha256.Size]byte]string // SHA-256 of a token → identity
	users  map[string][]byte            // user → bcrypt hash
	// dummy is compared against for unknown users, so timing does not
	// tell which users exist.
	dummy []byte
}

// ErrAccessFile is wrapped when a token or users file cannot be read or a
// line of it does not parse; the error names the file and line.
var ErrAccessFile = errors.New("bad access file")

// LoadAccess reads the bearer tokens file and the users file (either may
// be ""; both "" returns nil, which refuses every write).
//
// The tokens file holds one token per line, optionally after the identity
// it stands for and a space ("ci-bot s3cr3t..."); a token alone is
// recorded as "token:N", N its line. The users file holds "user:hash"
// lines with bcrypt hashes, as `htpasswd -nB user` writes them. Blank
// lines and lines starting with # are skipped. A token shorter than 16
// bytes is refused: it would be guessed.
func LoadAccess(tokensFile, usersFile string) (*Access, error) {
	if tokensFile == "" && usersFile == "" {
		return nil, nil
	}
	a := &Access{tokens: map[[sha256.Size]byte]string{}, users: map[string][]byte{}}
	if tokensFile != "" {
		err := eachLine(tokensFile, func(n int, line string) error {
			id, tok, ok := strings.Cut(line, " ")
			if !ok {
				id, tok = fmt.Sprintf("token:%d", n), line
			}
			tok = strings.TrimSpace(tok)
			if len(tok) < 16 {
				return fmt.Errorf("token of %q has %d bytes, want at least 16", id, len(tok))
			}
			a.tokens[sha256.Sum256([]byte(tok))] = id
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if usersFile != "" {
		err := eachLine(usersFile, func(_ int, line string) error {
			user, hash, ok := strings.Cut(line, ":")
			if !ok || user == "" {
				return errors.New(`want "user:bcrypt-hash"`)
			}
			if _, err := bcrypt.Cost([]byte(hash)); err != nil {
				return fmt.Errorf("user %q: not a bcrypt hash (make one with `htpasswd -nB %s`): %v", user, user, err)
			}
			a.users[user] = []byte(hash)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(a.users) > 0 {
		a.dummy, _ = bcrypt.GenerateFromPassword([]byte("parsley-observe"), bcrypt.DefaultCost)
	}
	if len(a.tokens) == 0 && len(a.users) == 0 {
		return nil, fmt.Errorf("web: access files %q %q name no token and no user: %w", tokensFile, usersFile, ErrAccessFile)
	}
	return a, nil
}

func eachLine(path string, do func(n int, line string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("web: %w: %w", ErrAccessFile, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := do(n, line); err != nil {
			return fmt.Errorf("web: %s line %d: %v: %w", path, n, err, ErrAccessFile)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("web: read %s: %v: %w", path, err, ErrAccessFile)
	}
	return nil
}

// Basic reports whether a has password users, for the login challenge.
func (a *Access) Basic() bool { return a != nil && len(a.users) > 0 }

// identify returns who r's credentials name, or "" if they name nobody.
func (a *Access) identify(r *http.Request) string {
	if a == nil {
		return ""
	}
	if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		sum := sha256.Sum256([]byte(strings.TrimSpace(auth[7:])))
		// A map lookup by hash: timing reveals nothing about the token.
		return a.tokens[sum]
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return ""
	}
	hash, known := a.users[user]
	if !known {
		bcrypt.CompareHashAndPassword(a.dummy, []byte(pass))
		return ""
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(pass)) != nil {
		return ""
	}
	return user
}

// crossSite says why a write request may come from another site, or ""
// when it is same-origin. A browser marks every request with
// Sec-Fetch-Site, and with Origin on a POST; a request must also carry
// a JSON body, which a cross-site form cannot send without a CORS
// preflight that this server never grants.
func crossSite(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site: " + site
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || subtle.ConstantTimeCompare([]byte(u.Host), []byte(r.Host)) != 1 {
			return "Origin " + o + " is not this server (" + r.Host + ")"
		}
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return "Content-Type " + ct + " (want application/json)"
	}
	return ""
}
