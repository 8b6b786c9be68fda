package listener

import (
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"

	"golang.org/x/crypto/bcrypt"

	"github.com/gobridge/gobridge/topics"
)

// access decides who may connect, and what each client may publish and
// subscribe to. A client's identity is the username it sent, else the
// common name of its verified client certificate, else none (anonymous).
type access struct {
	users     map[string]*User // with their ACL defaults applied
	anonymous bool             // clients without an identity may connect
	anon      ACL              // ... under this ACL
	byCert    ACL              // a certificate's name that is no user
	hashing   chan struct{}    // one bcrypt comparison at a time: bounds the CPU a flood of CONNECTs costs
}

func newAccess(o Options) (*access, error) {
	a := &access{
		users:   make(map[string]*User, len(o.Users)),
		hashing: make(chan struct{}, 1),
	}
	certs := o.TLS != nil && o.TLS.ClientAuth == tls.RequireAndVerifyClientCert // required and verified
	withDefaults := func(acl ACL, who string) (ACL, error) {
		if acl.Publish == nil {
			acl.Publish = o.Topics
		}
		for _, f := range append(append([]string(nil), acl.Publish...), acl.Subscribe...) {
			if err := topics.ValidateFilter(f); err != nil {
				return acl, fmt.Errorf("%w: %s: %v", ErrConfig, who, err)
			}
		}
		return acl, nil
	}
	var err error
	for i, u := range o.Users {
		switch {
		case u.Username == "":
			return nil, fmt.Errorf("%w: user %d has no username", ErrConfig, i)
		case a.users[u.Username] != nil:
			return nil, fmt.Errorf("%w: user %q is listed twice", ErrConfig, u.Username)
		case u.Password != "" && u.PasswordHash != "":
			return nil, fmt.Errorf("%w: user %q has both a password and a password hash", ErrConfig, u.Username)
		}
		if u.PasswordHash != "" {
			if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
				return nil, fmt.Errorf("%w: user %q: password hash is not a bcrypt hash: %v", ErrConfig, u.Username, err)
			}
		}
		if u.ACL, err = withDefaults(u.ACL, "user "+u.Username); err != nil {
			return nil, err
		}
		a.users[u.Username] = &u
	}
	if a.anon, err = withDefaults(o.Anonymous, "anonymous"); err != nil {
		return nil, err
	}
	a.byCert, _ = withDefaults(ACL{}, "")
	a.anonymous = o.AllowAnonymous || (len(o.Users) == 0 && !certs && isLoopback(o.Listen))
	if !a.anonymous && len(o.Users) == 0 && !certs {
		return nil, fmt.Errorf("%w: %s is not a loopback address and there are no users or client certificates: set AllowAnonymous to accept anyone", ErrConfig, o.Listen)
	}
	return a, nil
}

// authenticate reports whether a client may connect, and under which
// identity. username and password come from its CONNECT; cn is the common
// name of its verified certificate ("" without one). A user is
// authenticated by its password, or by a certificate of its name.
func (a *access) authenticate(username string, password []byte, cn string) (identity string, ok bool) {
	identity = username
	if identity == "" {
		identity = cn
	}
	if identity == "" {
		return "", a.anonymous
	}
	if cn != "" && cn == identity {
		return identity, true // users or not: the certificate vouches for it
	}
	u := a.users[identity]
	switch {
	case u == nil:
		return "", false
	case u.PasswordHash != "":
		a.hashing <- struct{}{}
		defer func() { <-a.hashing }()
		return identity, bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), password) == nil
	case u.Password != "":
		return identity, subtle.ConstantTimeCompare([]byte(u.Password), password) == 1
	}
	return "", false // a certificate-only user without its certificate
}

// acl returns the ACL of an authenticated identity.
func (a *access) acl(identity string) *ACL {
	if identity == "" {
		return &a.anon
	}
	if u := a.users[identity]; u != nil {
		return &u.ACL
	}
	return &a.byCert
}

// mayPublish reports whether topic matches one of the ACL's publish
// filters.
func (acl *ACL) mayPublish(topic string) bool { return topics.MatchAny(acl.Publish, topic) }

// maySubscribe reports whether filter (or a topic delivered to it) is a
// valid filter covered by one of the ACL's subscribe filters.
func (acl *ACL) maySubscribe(filter string) bool {
	if len(acl.Subscribe) == 0 || topics.ValidateFilter(filter) != nil {
		return false
	}
	for _, f := range acl.Subscribe {
		if topics.Covers(f, filter) {
			return true
		}
	}
	return false
}

// isLoopback reports whether a listen address accepts only local clients.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
