package sqlite

import (
	"syscall"
	"testing"
)

// TestNetworkFS names the network filesystems by their statfs magic, as
// Linux reports them (f_type is signed on some architectures), and passes
// the local one the tests run on.
func TestNetworkFS(t *testing.T) {
	for magic, want := range map[int64]string{
		0x6969: "nfs", 0xff534d42: "cifs", int64(int32(-0xacb2be)): "cifs", 0xfe534d42: "smb2", 0x517b: "smb",
		0x01021997: "9p", 0xef53: "", 0x01021994: "", 0x58465342: "",
	} {
		if got := networkFS(magic); got != want {
			t.Errorf("networkFS(%#x) = %q, want %q", magic, got, want)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(t.TempDir(), &st); err != nil {
		t.Fatal(err)
	}
	if name := networkFS(int64(st.Type)); name != "" {
		t.Skipf("the test directory is on %s", name)
	}
}
