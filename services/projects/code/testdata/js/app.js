const express = require("express");

const PORT = 8080;

class Cart {
  items = [];

  add(item) {
    this.items.push(item);
    return this;
  }

  total() {
    return this.items.reduce((sum, i) => sum + i.price, 0);
  }
}

function checkout(cart) {
  // add() here is only a comment
  cart.add({ price: 1 });
  return cart.total();
}

const makeCart = () => new Cart();

module.exports = { Cart, checkout, makeCart, PORT, express };
