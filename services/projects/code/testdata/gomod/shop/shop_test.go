package shop_test

import (
	"testing"

	"example.com/shop/shop"
)

func TestAdd(t *testing.T) {
	c := new(shop.Cart).Add("x")
	if len(c.Items) != 1 {
		t.Fatal("Add did not add")
	}
}
