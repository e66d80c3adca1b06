package session

import (
	"github.com/codecage/codecage/internal/egress"
)

// SetNetwork replaces the session's egress rules (zero: none, the
// operator's allow list alone). Its proxy applies them to every
// connection it admits from now on, while code runs too; a restart, a
// park and a fork keep them. The caller checked them (egress.NetworkRules.Check).
func (t *Table) SetNetwork(se *Session, rules egress.NetworkRules) error {
	se.netMu.Lock()
	defer se.netMu.Unlock()
	if se.proxy != nil {
		if err := se.proxy.SetRules(rules); err != nil {
			return err
		}
	}
	if rules.IsZero() {
		se.network = nil
	} else {
		se.network = &rules
	}
	t.log.Info("session network rules set", "session", se.id, "allow_out", len(rules.AllowOut), "deny_out", len(rules.DenyOut))
	return nil
}

// adoptNetwork gives a spare, whose proxy started without rules, the
// rules of the session it becomes. Rules the service checked always set;
// should they not, the proxy denies all rather than run wider.
func (se *Session) adoptNetwork(rules *egress.NetworkRules) {
	se.netMu.Lock()
	defer se.netMu.Unlock()
	se.network = rules
	if se.proxy == nil {
		return
	}
	r := egress.NetworkRules{}
	if rules != nil {
		r = *rules
	}
	if err := se.proxy.SetRules(r); err != nil {
		_ = se.proxy.SetRules(egress.DenyAll())
	}
}

// SetCredentials replaces the session's credential bindings (the caller
// checked them: egress.CheckBindings); its proxy uses them for every
// tunnel it opens from now on, and asks for their secrets again (one
// deleted or replaced meanwhile). A restart, a park and a fork keep them.
func (t *Table) SetCredentials(se *Session, list []egress.Binding) error {
	se.netMu.Lock()
	defer se.netMu.Unlock()
	if se.proxy != nil {
		if err := se.proxy.SetBindings(list, se.secrets(se.id)); err != nil {
			return err
		}
	}
	se.credentials = list
	t.log.Info("session egress credentials set", "session", se.id, "bindings", len(list))
	return nil
}

// Credentials are the session's credential bindings.
func (se *Session) Credentials() []egress.Binding {
	se.netMu.Lock()
	defer se.netMu.Unlock()
	return se.credentials
}

// adoptCredentials gives a spare the bindings of the session it becomes,
// under its new id; a proxy that cannot take them denies all.
func (se *Session) adoptCredentials(list []egress.Binding) {
	se.netMu.Lock()
	defer se.netMu.Unlock()
	se.credentials = list
	if se.proxy != nil {
		if err := se.proxy.SetBindings(list, se.secrets(se.id)); err != nil {
			_ = se.proxy.SetRules(egress.DenyAll())
		}
	}
}

// secrets resolves the session's secrets as id (nil: no source).
func (se *Session) secrets(id string) egress.SecretFunc {
	if se.secretsOf == nil {
		return nil
	}
	return se.secretsOf(se.owner, id)
}

// setTrust records the proxy's trust directory, for commands.
func (se *Session) setTrust(dir string) {
	se.netMu.Lock()
	se.trust = dir
	se.netMu.Unlock()
}

// Trust is the host directory of the session's proxy's authority
// certificate ("": no proxy, or no authority).
func (se *Session) Trust() string {
	se.netMu.Lock()
	defer se.netMu.Unlock()
	return se.trust
}
