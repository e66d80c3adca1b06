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
