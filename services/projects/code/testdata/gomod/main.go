package main

import (
	"fmt"

	"example.com/shop/shop"
)

func main() {
	c := &shop.Cart{}
	c.Add("apple").Add("pear")
	var w shop.Wishlist
	w.Add("a bike")
	add := c.Add // a method value is a use too
	add("plum")
	shop.Fill(c, 2)
	fmt.Println(len(c.Items), w.Wishes) // FIXME: print nicer
}
