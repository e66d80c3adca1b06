package event

import (
	"strconv"
	"strings"

	"github.com/codecage/codecage/internal/session"
)

// LogLine is how ev reads in the log of session id (session/logs.go):
// info when the request succeeded, warn when the code failed, error when
// it could not run or a limit ended it. ok is false for what that log
// leaves out: a session's own lifecycle going well, which the session
// table logs itself.
func LogLine(ev Event, id string) (level, msg string, fields map[string]string, ok bool) {
	level = session.LevelError
	switch ev.Outcome {
	case "success", "":
		level = session.LevelInfo
	case "error":
		level = session.LevelWarn
	}
	if ev.Kind == EventSession && level == session.LevelInfo {
		return "", "", nil, false
	}
	action := ev.Action
	if action == "session:"+id {
		action = "" // a run's or command's action names its session: this log's
	}
	msg = strings.TrimSpace(ev.Kind + " " + action)
	if ev.Outcome != "" {
		msg += ": " + ev.Outcome
	}
	fields = map[string]string{"duration_ms": strconv.FormatInt(ev.Duration.Milliseconds(), 10)}
	for k, v := range map[string]string{"code": ev.Code, "execution_id": ev.ExecutionID, "limit": ev.Limit, "detail": ev.Detail, "backend": ev.Backend} {
		if v != "" {
			fields[k] = v
		}
	}
	return level, msg, fields, true
}
