package baseline_test

import (
	"testing"

	"github.com/cordon-sandbox/cordon/baseline"
)

// TestMergeAccounts: an image's accounts keep theirs, lose any that takes
// the sandbox user's uid or name, and gain the sandbox user and nobody.
func TestMergeAccounts(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/bash\n# a comment\napp:x:1000:1000::/app:/bin/sh\nsandbox:x:1234:1234::/x:/bin/sh\nbroken line\n"
	group := "root:x:0:\napp:x:1000:\n"
	p, g := baseline.MergeAccounts(passwd, group, 1000)
	if want := "root:x:0:0:root:/root:/bin/bash\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"; p != want {
		t.Errorf("passwd:\n%s\nwant:\n%s", p, want)
	}
	if want := "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"; g != want {
		t.Errorf("group:\n%s\nwant:\n%s", g, want)
	}
	// An image without accounts gets the sandbox user's and nobody's;
	// root as the user is root.
	p, _ = baseline.MergeAccounts("", "", 0)
	if want := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"; p != want {
		t.Errorf("empty image, uid 0:\n%s", p)
	}
}
