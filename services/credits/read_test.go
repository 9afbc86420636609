package credits_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
)

// Who reads which wallet: an agent its own, the owner and admins any.

func TestAgentsReadOnlyTheirOwnWallet(t *testing.T) {
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		grant(t, c, "agent-a", 10, "inv-1")
		if _, err := c.GetBalance(as("agent-b"), &creditsv1.GetBalanceRequest{Wallet: "agent-a"}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("agent-b reads agent-a's balance: code %v, want permission_denied", connect.CodeOf(err))
		}
		if _, err := c.ListLedger(as("agent-b"), &creditsv1.ListLedgerRequest{Wallet: "agent-a"}); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("agent-b lists agent-a's ledger: code %v, want permission_denied", connect.CodeOf(err))
		}
		if res, err := c.ListLedger(as("agent-b"), &creditsv1.ListLedgerRequest{}); err != nil || len(res.GetEntries()) != 0 {
			t.Errorf("agent-b's own ledger = %v (err %v), want empty", res.GetEntries(), err)
		}
		if _, err := c.GetBalance(context.Background(), &creditsv1.GetBalanceRequest{}); servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("balance without identity: code %v, want unauthenticated", connect.CodeOf(err))
		}
		if _, err := c.Spend(context.Background(), &creditsv1.SpendRequest{Amount: 1, Reference: "x"}); servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("spend without identity: code %v, want unauthenticated", connect.CodeOf(err))
		}
	})
}

func TestOwnerAndAdminReadAnyWallet(t *testing.T) {
	withRoles := func(agent string, roles ...string) context.Context {
		return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: agent, Agent: agent, Roles: roles}})
	}
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		grant(t, c, "agent-a", 10, "inv-1")
		spend(t, c, "agent-a", 3, "job-1")
		for _, role := range []string{mesh.RoleOwner, mesh.RoleAdmin} {
			ctx := withRoles("boss", role)
			bal, err := c.GetBalance(ctx, &creditsv1.GetBalanceRequest{Wallet: "agent-a"})
			if err != nil || bal.GetWallet() != "agent-a" || bal.GetBalance() != 7 {
				t.Errorf("role %s reads agent-a's balance = %v (err %v), want agent-a holding 7", role, bal, err)
			}
			led, err := c.ListLedger(ctx, &creditsv1.ListLedgerRequest{Wallet: "agent-a"})
			if err != nil || len(led.GetEntries()) != 2 || led.GetEntries()[0].GetReference() != "job-1" {
				t.Errorf("role %s lists agent-a's ledger = %v (err %v), want the spend then the grant", role, led.GetEntries(), err)
			}
			// Without a wallet it is still the caller's own.
			if own, err := c.GetBalance(ctx, &creditsv1.GetBalanceRequest{}); err != nil || own.GetWallet() != "boss" || own.GetBalance() != 0 {
				t.Errorf("role %s reads its own balance = %v (err %v), want boss holding 0", role, own, err)
			}
		}
		// Any other role is no licence to read another's wallet.
		_, err := c.GetBalance(withRoles("agent-b", mesh.RoleService, "auditor"), &creditsv1.GetBalanceRequest{Wallet: "agent-a"})
		if servertest.Code(t, err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "owner or admin role") {
			t.Errorf("agent-b with other roles reads agent-a's balance: %v, want permission_denied naming the roles that may", err)
		}
	})
}

// TestWalletsListEveryWalletToThoseWhoOversee: the owner and admins list
// every wallet, the most recently changed first, paged; another agent
// only its own; a page beyond the rules is refused.
func TestWalletsListEveryWalletToThoseWhoOversee(t *testing.T) {
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		grant(t, c, "agent-a", 10, "inv-1")
		grant(t, c, "agent-b", 500, "inv-2")
		spend(t, c, "agent-a", 3, "job-1")
		boss := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "boss", Agent: "boss", Roles: []string{mesh.RoleAdmin}}})
		res, err := c.ListWallets(boss, &creditsv1.ListWalletsRequest{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetWallets()) != 1 || res.GetPage().GetTotal() != 2 || res.GetPage().GetNextOffset() != 1 {
			t.Fatalf("the first page = %v, page %v; want one of two wallets and a next page", res.GetWallets(), res.GetPage())
		}
		if w := res.GetWallets()[0]; w.GetWallet() != "agent-a" || w.GetBalance() != 7 || !w.GetLow() || w.GetUpdateTime() == nil {
			t.Errorf("the most recently changed wallet = %v, want agent-a holding 7, low", w)
		}
		next, err := c.ListWallets(boss, &creditsv1.ListWalletsRequest{Offset: 1, Limit: 1})
		if err != nil || len(next.GetWallets()) != 1 || next.GetWallets()[0].GetWallet() != "agent-b" || next.GetWallets()[0].GetLow() {
			t.Errorf("the second page = %v (err %v), want agent-b, not low", next.GetWallets(), err)
		}
		own, err := c.ListWallets(as("agent-b"), &creditsv1.ListWalletsRequest{})
		if err != nil || len(own.GetWallets()) != 1 || own.GetWallets()[0].GetWallet() != "agent-b" {
			t.Errorf("agent-b lists %v (err %v), want only its own wallet", own.GetWallets(), err)
		}
		if _, err := c.ListWallets(boss, &creditsv1.ListWalletsRequest{Limit: 201}); servertest.Code(t, err) != connect.CodeInvalidArgument {
			t.Errorf("a page of 201: code %v, want invalid_argument", connect.CodeOf(err))
		}
	})
}
