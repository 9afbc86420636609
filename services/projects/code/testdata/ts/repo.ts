import { Store } from "./store";

// UserRepo keeps users. A comment that mentions save() is not a use.
export interface Repo<T> {
  readonly name: string;
  save(item: T): Promise<void>;
}

export enum Role {
  Admin,
  Member = "member",
}

export type UserId = string;

export class UserRepo implements Repo<User> {
  readonly name = "users";
  private cache: Map<UserId, User> = new Map();

  constructor(private store: Store) {}

  async save(user: User): Promise<void> {
    this.cache.set(user.id, user);
    await this.store.put("save", user);
  }

  find(id: UserId): User | undefined {
    return this.cache.get(id);
  }
}

export interface User {
  id: UserId;
  role: Role;
}

export function register(repo: UserRepo, user: User): void {
  repo.save(user);
}

export const greet = (user: User): string => `hello ${user.id}`;

namespace Audit {
  export function record(repo: UserRepo) {
    const label = "save";
    return repo.find(label);
  }
}
