// Package protoenum turns protobuf enum values into the words people read
// in messages and logs, and stores keep: "active" for
// AGENT_STATUS_ACTIVE.
package protoenum

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Word is e's value name without the enum's prefix, in lower case:
// "active" for AGENT_STATUS_ACTIVE, "max_grant_amount" for
// CONFIG_KEY_MAX_GRANT_AMOUNT, "unspecified" for the zero value. The
// prefix is the one every value shares with the zero value,
// <PREFIX>_UNSPECIFIED (buf lint's ENUM_VALUE_PREFIX and
// ENUM_ZERO_VALUE_SUFFIX). A number the enum does not define is written as
// the number.
func Word(e protoreflect.Enum) string {
	values := e.Descriptor().Values()
	v := values.ByNumber(e.Number())
	if v == nil {
		return strconv.Itoa(int(e.Number()))
	}
	name := string(v.Name())
	if zero := values.ByNumber(0); zero != nil {
		if prefix, ok := strings.CutSuffix(string(zero.Name()), "UNSPECIFIED"); ok {
			name = strings.TrimPrefix(name, prefix)
		}
	}
	return strings.ToLower(name)
}
