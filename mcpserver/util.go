package mcpserver

import (
	"encoding/json"

	"github.com/cordon-sandbox/cordon/egress"
)

func jsonMarshal(v any) (json.RawMessage, error) { return json.Marshal(v) }

func parseRule(s string) (egress.Rule, error) { return egress.ParseRule(s) }
