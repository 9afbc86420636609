// Package shop has two types with a method of one name, Add: references
// to one are not references to the other.
package shop

import "fmt"

// Cart holds items.
type Cart struct {
	Items []string
}

// Add puts an item in the cart.
func (c *Cart) Add(item string) *Cart {
	c.Items = append(c.Items, item)
	return c
}

// Wishlist holds wishes.
type Wishlist struct {
	Wishes []string
}

// Add puts a wish on the list (not a Cart.Add).
func (w *Wishlist) Add(wish string) {
	w.Wishes = append(w.Wishes, wish)
}

// Adder is what both can do, nearly.
type Adder interface {
	Add(string) *Cart
}

// Fill adds n items through an Adder.
func Fill(a Adder, n int) {
	for i := range n {
		a.Add(fmt.Sprint(i))
	}
}
